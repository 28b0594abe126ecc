"""What both backbone drivers need from the host: UDP sockets, sendmmsg, multicast options, the sequence state file."""
