"""The subject layer, pure: envelopes, subject patterns, routing, interest, sessions, snapshots, authentication.

Nothing here touches a socket, a thread, a process or gevent."""
