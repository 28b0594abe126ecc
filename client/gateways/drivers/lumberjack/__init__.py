"""The Lumberjack gateway's I/O: its TLS server and each sender's driver, acknowledging once the backbone confirmed."""
