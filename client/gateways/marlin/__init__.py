"""The Marlin gateway: Marlin PubSub channel clients on the backbone."""
