"""The backbone protocol, pure: frames, a client's connection state machine, gap tracking, publishing.

Nothing here touches a socket, a thread, a process or gevent: bytes and time in, actions out."""
