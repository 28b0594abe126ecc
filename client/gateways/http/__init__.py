"""The HTTP/1.1 and WebSocket gateway: browsers and HTTP tools publish and subscribe on one port (h11, wsproto)."""
