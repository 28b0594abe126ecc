"""Operating-system networking every endpoint shares: addresses, socket buffers, multicast group sockets."""
