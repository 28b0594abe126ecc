"""The hot standby pair: the replication between a primary backbone and its standby (docs/protocol.md)."""
