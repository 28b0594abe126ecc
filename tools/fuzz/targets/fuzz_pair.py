"""Fuzz target: a standby pair's datagrams (decode, unseal) and a standby fed them (docs/protocol.md, "Hot standby
pair"): refused with a reason or applied, never an exception, and what a standby holds stays an unbroken run."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import instrumented, main  # noqa: E402

with instrumented():
    from fyrehose.backbone.pair import frames
    from fyrehose.backbone.pair.standby import ReplicaFollower
    from fyrehose.backbone.pushes import LogEntry
    from fyrehose.protocol import codec

KEY = bytes(range(32))
_DATA = b"".join(codec.encode_deliver(seq, b"m%d" % seq) for seq in (5, 6, 7))
SEEDS = [
    *frames.records_for(1, LogEntry(memoryview(_DATA), 3), 5, ("10.0.0.1", 4000), [(9, 3, 5)]),
    *frames.encode_state(1, frames.ROLE_PRIMARY, frames.STATE_SYNC, 7, 7, 4096, 500,
                         [frames.Member(("10.0.0.2", 5000), codec.FLAG_BATCH, 12)]),
    frames.encode_ack(1, 7, 4096),
    frames.encode_replay(1, 3, 4),
    frames.encode_recover(2, 3, 4),
    frames.seal(frames.encode_ack(2, 1, 2), KEY),
]


def check(data: bytes) -> None:
    opened = frames.unseal(data, KEY)
    assert opened is None or frames.seal(opened, KEY) == data, "unseal took a datagram it would not seal so"
    follower = ReplicaFollower(0, 0)
    for datagram in (data, opened):
        if datagram is None:
            continue
        frame = frames.decode(datagram)
        assert isinstance(frame, str | frames.Record | frames.State | frames.Ack | frames.Replay
                          | frames.Recover)
        if isinstance(frame, frames.Record):
            held = follower.held
            for record in follower.on_record(frame, 0.0):
                assert record.first == held + 1 or held == 0, "a standby took a record that leaves a hole"
                held = record.last
            assert follower.held >= held
        elif isinstance(frame, frames.State):
            follower.on_state(frame, 0.0)
            follower.replays(1.0)
            follower.takeover(1.0)


if __name__ == "__main__":
    main(check, SEEDS)
