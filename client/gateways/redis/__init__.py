"""The Redis gateway: RESP clients (redis-py, ioredis, redis-cli) publish and subscribe through the backbone."""
