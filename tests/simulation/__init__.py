"""A deterministic simulation of a backbone pair with keepalived and its clients, and its history checker."""
