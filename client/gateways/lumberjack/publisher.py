"""Publishing for every connection: the blocking :class:`fyrehose.Client` behind gevent's thread pool.

``Client.publish_many`` returns only when the backbone CONFIRMed every
message, retrying lost PUSHes with the same tags.  It blocks on real threads,
so it runs in a thread pool while the calling greenlet waits; no monkey
patching is needed, and the client's receive thread keeps taking CONFIRMs
while a greenlet inflates a large batch.

The confirmed messages are then kept (``hold_bytes``, oldest dropped first)
and the client is a journaling one: when a subscriber missed a DELIVER and
REQUESTs it, the backbone may FORWARD the request here and the gateway sends
the message itself.  That closes two gaps in which an acked event could
otherwise be lost for good: subscribers re-register with a restarted backbone
only at their next KEEPALIVE (up to a second later), and a backbone killed
after sending a CONFIRM but before its DELIVERs never delivers at all.
"""
from __future__ import annotations

from gevent.threadpool import ThreadPool

from fyrehose.client import MAX_PUBLISH_TIMEOUT, Client
from fyrehose.recent_messages import MemoryJournal


class HoldingPublisher:
    def __init__(self, client: Client, store: MemoryJournal, timeout: float, threads: int) -> None:
        if not 0 < timeout <= MAX_PUBLISH_TIMEOUT:
            raise ValueError(f"the publish timeout must be in (0, {MAX_PUBLISH_TIMEOUT:g}] seconds")
        self.client = client
        self.store = store
        self.timeout = timeout
        self._pool = ThreadPool(threads)

    def publish(self, messages: list[bytes]) -> list[int]:
        """Their sequence numbers once all are confirmed; PublishTimeout/BackboneUnreachable otherwise.

        Called from greenlets only, so the store has one writer (the hub's thread);
        the client's forwarder thread only reads it.
        """
        seqs = self._pool.apply(self.client.publish_many, (messages,),
                                {"timeout": self.timeout, "window": len(messages)})
        for seq, message in zip(seqs, messages):
            self.store.add(seq, message)
        return seqs

    def close(self) -> None:
        self._pool.kill()
