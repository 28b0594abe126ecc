"""Who may connect to a gateway, with which secret, and what each user may publish and subscribe to."""
