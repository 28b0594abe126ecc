"""The NATS gateway: unmodified NATS clients publish and subscribe through the backbone."""
