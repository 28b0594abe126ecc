"""``fyrehose bench compiled``: each compiled module's per-message calls, timed compiled and from its own ``.py``.

The two builds run side by side in this one process: the module as imported
(compiled when the build is there) and its ``.py`` loaded under another name
(:func:`fyrehose.runtime.compiled.load_source`, what the oracle tests compare
against).  Every case is the call a hot path makes, on inputs the size of the
bench's messages (64-byte payloads, datagrams of 100 frames), built with the
module's own classes; each is timed in turns (pure first in even rounds,
compiled first in odd ones), and reported as microseconds per message,
min/median/max over the rounds, with the median's gain.  A module whose
compiled build does not beat its source here has no place in
``COMPILED_MODULES`` (docs/benchmarks.md).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TextIO

from fyrehose.backbone import pushes as pushes_module
from fyrehose.protocol import codec
from fyrehose.runtime.compiled import COMPILED_MODULES, is_compiled, load_source
from fyrehose.subjects import envelope as envelope_module
from fyrehose.tools.bench.stats import spread

PAYLOAD = b"x" * 64
FRAMES = 100  # frames per datagram, about what the bench's publishers pack

Run = Callable[[], object]
Case = tuple[str, Run, int]  # name, one call, messages it handles
Cases = Callable[[ModuleType], list[Case]]


def _deliver_datagram(first: int, count: int = FRAMES, payload: bytes = PAYLOAD) -> bytes:
    return b"".join(codec.encode_deliver(seq, payload) for seq in range(first, first + count))


def _counting(start: int = 1) -> Iterator[int]:
    number = start
    while True:
        yield number
        number += 1


def _envelope(module: ModuleType) -> list[Case]:
    full = module.Envelope("orders.eu.42", PAYLOAD, reply="_INBOX.abc.1", session="alice.XYZ", seqno=7)
    plain = module.Envelope("orders.eu.42", PAYLOAD)
    raw_full, raw_plain = module.encode(full), module.encode(plain)
    known: dict[bytes, str] = {}
    return [
        ("encode (subject only)", lambda: module.encode(plain), 1),
        ("encode (reply, session)", lambda: module.encode(full), 1),
        ("decode (subject only)", lambda: module.decode(raw_plain), 1),
        ("decode (reply, session)", lambda: module.decode(raw_full), 1),
        ("decode, known subjects", lambda: module.decode(raw_plain, known), 1),
        ("peek_subject", lambda: module.peek_subject(raw_full), 1),
    ]


def _selection(module: ModuleType) -> list[Case]:
    datagram = _deliver_datagram(1, FRAMES, envelope_module.encode(envelope_module.Envelope("orders.eu.42", PAYLOAD)))
    step = len(datagram) // FRAMES
    spans = codec.scan(datagram, codec.DELIVER)[0]
    skipped: dict[bytes, bool] = {b"orders.eu.42": False}
    chosen: dict[bytes, bool] = {b"orders.eu.42": True}
    return [
        ("wanted, none chosen", lambda: module.wanted(datagram, 1, step, None, 1, skipped, bool), FRAMES),
        ("wanted, none chosen (spans)", lambda: module.wanted(datagram, 1, 0, spans, 1, skipped, bool), FRAMES),
        ("wanted, all chosen", lambda: module.wanted(datagram, 1, step, None, 1, chosen, bool), FRAMES),
    ]


def _pub_scan(module: ModuleType) -> list[Case]:
    pubs = bytearray(b"PUB orders.eu.42 64\r\n" + PAYLOAD + b"\r\n") * 16
    step = len(pubs) // 16

    def sixteen() -> object:
        return [module.plain_pub(pubs, start, 1 << 20, 4096) for start in range(0, len(pubs), step)]

    return [("plain_pub, 16 in a buffer", sixteen, 16)]


def _array_scan(module: ModuleType) -> list[Case]:
    publish = b"*3\r\n$7\r\nPUBLISH\r\n$21\r\nbench.redis-benchmark\r\n$64\r\n" + PAYLOAD + b"\r\n"
    sixteen = publish * 16
    return [("whole_commands, one PUBLISH", lambda: module.whole_commands(publish, 1 << 20, 1 << 20, 2 << 20), 1),
            ("whole_commands, 16 PUBLISH in a read", lambda: module.whole_commands(sixteen, 1 << 20, 1 << 20, 2 << 20),
             16)]


def _outbox(module: ModuleType) -> list[Case]:
    outbox = module.Outbox()

    def held_reply() -> object:
        outbox.fill(outbox.hold(), b":1\r\n")
        return outbox.take()

    def pushed() -> object:
        outbox.push(b"*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$64\r\n" + PAYLOAD + b"\r\n")
        return outbox.take()

    return [("a held reply: hold, fill, take", held_reply, 1), ("a pushed message: push, take", pushed, 1)]


def _msg_frame(module: ModuleType) -> list[Case]:
    plain = envelope_module.encode(envelope_module.Envelope("orders.eu.42", PAYLOAD))
    replied = envelope_module.encode(envelope_module.Envelope("orders.eu.42", PAYLOAD, reply="_INBOX.a.1"))
    return [("plain_fields", lambda: module.plain_fields(plain), 1),
            ("plain_fields, with a reply", lambda: module.plain_fields(replied), 1),
            ("msg_tail", lambda: module.msg_tail(plain, 20, None), 1)]


def _codec(module: ModuleType) -> list[Case]:
    uniform = _deliver_datagram(1)
    varied = b"".join(module.encode_deliver(seq, PAYLOAD[:seq % 60 + 4]) for seq in range(1, FRAMES + 1))
    pushes = [module.encode_push(PAYLOAD, tag) for tag in range(1, FRAMES + 1)]
    confirms = b"".join(module.encode_confirm(tag, tag + 9) for tag in range(1, FRAMES + 1))
    spans, _ = module.scan(varied, module.DELIVER)
    return [
        ("encode_deliver", lambda: module.encode_deliver(12345, PAYLOAD), 1),
        ("encode_push", lambda: module.encode_push(PAYLOAD, 77), 1),
        ("scan (varied sizes)", lambda: module.scan(varied, module.DELIVER), FRAMES),
        ("uniform_step", lambda: module.uniform_step(uniform, module.DELIVER), FRAMES),
        ("consecutive_first", lambda: module.consecutive_first(spans), FRAMES),
        ("decode (packed DELIVERs)", lambda: module.decode(uniform), FRAMES),
        ("decode_confirm_runs", lambda: module.decode_confirm_runs(confirms), FRAMES),
        ("pack_greedy", lambda: module.pack_greedy(pushes), FRAMES),
    ]


def _frame_run(module: ModuleType) -> list[Case]:
    uniform = module.FrameRun(1, FRAMES, codec.FRAME_HEADER + len(PAYLOAD), _deliver_datagram(1))
    data = b"".join(codec.encode_deliver(seq, PAYLOAD[:seq % 60 + 4]) for seq in range(1, FRAMES + 1))
    spans, _ = codec.scan(data, codec.DELIVER)
    varied = module.FrameRun(1, FRAMES, 0, data, spans)
    return [
        ("payloads (one size)", uniform.payloads, FRAMES),
        ("payloads (varied sizes)", varied.payloads, FRAMES),
        ("messages from..to", lambda: list(uniform.messages(2, FRAMES - 1)), FRAMES - 2),
    ]


def _in_order(module: ModuleType) -> list[Case]:
    one, packed = _deliver_datagram(7, 1), _deliver_datagram(7)
    return [("continuing_step, one frame", lambda: module.continuing_step(one, 7), 1),
            ("continuing_step, 100 frames", lambda: module.continuing_step(packed, 7), FRAMES)]


def _pushes(module: ModuleType) -> list[Case]:
    uniform = b"".join(codec.encode_push(PAYLOAD, tag) for tag in range(1, FRAMES + 1))
    step = codec.FRAME_HEADER + len(PAYLOAD)
    entries = [module.LogEntry(memoryview(_deliver_datagram(1 + index * FRAMES)), FRAMES, step) for index in range(8)]
    varied = memoryview(b"".join(codec.encode_deliver(seq, PAYLOAD[:seq % 60 + 4]) for seq in range(1, FRAMES + 1)))
    return [
        ("uniform_frames+untagged+frame_tags", lambda: (module.uniform_frames(uniform),
                                                        module.untagged(uniform, step),
                                                        module.frame_tags(uniform, step)), FRAMES),
        ("confirm_block", lambda: module.confirm_block(range(5, 5 + FRAMES), 1000), FRAMES),
        ("batch_parts+join_parts (8 datagrams)", lambda: [module.join_parts(parts) for parts in
                                                          module.batch_parts(entries, 1400)], 8 * FRAMES),
        ("LogEntry.frame_bounds (varied)", lambda: module.LogEntry(varied, FRAMES).frame_bounds(), FRAMES),
    ]


def _cache_core(module: ModuleType) -> list[Case]:
    updates = [(seq, envelope_module.encode(envelope_module.Envelope(f"prices.item{seq % 20}", b'{"bid":%d}' % seq)))
               for seq in range(1, FRAMES + 1)]
    cache = module.Cache()
    base = _counting()

    def receive() -> object:
        offset = next(base) * FRAMES
        return cache.receive_messages([(seq + offset, payload) for seq, payload in updates], 0.0)

    def read() -> object:
        receive()
        return [cache.get(f"prices.item{index}") for index in range(20)]

    return [("receive_messages (100 updates)", receive, FRAMES),
            ("receive_messages, then get (fold) 20 subjects", read, FRAMES)]


def _cache_merge(module: ModuleType) -> list[Case]:
    record = b'{"bid":1,"ask":2,"last":{"price":3,"size":4},"name":"item"}'
    patches = [b'{"bid":%d,"last":{"price":%d}}' % (seq, seq + 1) for seq in range(10)]
    return [("merge", lambda: module.merge(record, patches[0]), 1),
            ("merge_many (10 patches)", lambda: module.merge_many(record, patches), 10)]


def _backbone_core(module: ModuleType) -> list[Case]:
    """The one-message datagram's path through the core: receive, flush, the recent log's copy (4 subscribers)."""
    backbone = module.Backbone(reserve_block=1 << 40)
    for index in range(4):
        keepalive = codec.encode(codec.Keepalive(flags=codec.FLAG_BATCH, token=bytes([index]) * codec.TOKEN_SIZE))
        backbone.receive(keepalive, ("127.0.0.1", 41000 + index), 1.0)
    backbone.flush(1.0)
    one, packed = codec.encode_push(PAYLOAD), b"".join(codec.encode_push(PAYLOAD) for _ in range(FRAMES))

    def through(datagram: bytes) -> object:
        backbone.receive(datagram, ("127.0.0.1", 40001), 1.0)
        out = backbone.flush(1.0)
        backbone.keep_recent()
        return out

    return [("receive + flush + keep_recent, one frame", lambda: through(one), 1),
            ("receive + flush + keep_recent, 100 frames", lambda: through(packed), FRAMES)]


def _recent_log(module: ModuleType) -> list[Case]:
    log = module.RecentLog(1 << 20)
    step = codec.FRAME_HEADER + len(PAYLOAD)
    one = [pushes_module.LogEntry(memoryview(codec.encode_deliver(1, PAYLOAD)), 1, step)]
    packed = [pushes_module.LogEntry(memoryview(_deliver_datagram(1)), FRAMES, step)]
    return [("add, one frame", lambda: log.add(one), 1), ("add, 100 frames", lambda: log.add(packed), FRAMES)]


CASES: dict[str, Cases] = {
    "fyrehose.subjects.envelope": _envelope,
    "fyrehose.subjects.selection": _selection,
    "fyrehose.protocol.codec": _codec,
    "fyrehose.protocol.frame_run": _frame_run,
    "fyrehose.protocol.in_order": _in_order,
    "fyrehose.backbone.pushes": _pushes,
    "fyrehose.cache.core": _cache_core,
    "fyrehose.cache.merge": _cache_merge,
    "fyrehose.gateways.nats.pub_scan": _pub_scan,
    "fyrehose.gateways.nats.msg_frame": _msg_frame,
    "fyrehose.backbone.core": _backbone_core,
    "fyrehose.backbone.recent_log": _recent_log,
    "fyrehose.gateways.redis.array_scan": _array_scan,
    "fyrehose.gateways.outbox": _outbox,
}


def per_message(run: Run, messages: int, seconds: float) -> float:
    """Microseconds of this process's CPU per message over repeated calls of ``run`` for about ``seconds`` of it
    (CPU time rather than wall time: on a shared machine, what other processes take does not count)."""
    calls = 0
    started = time.process_time()
    while True:
        for _ in range(16):
            run()
        calls += 16
        elapsed = time.process_time() - started
        if elapsed >= seconds:
            return elapsed / (calls * messages) * 1e6


@dataclass
class Timing:
    module: str
    case: str
    pure: list[float]
    compiled: list[float]


def measure(modules: list[str], rounds: int, seconds: float) -> list[Timing]:
    """Every case of ``modules``, both builds, alternated, ``rounds`` times."""
    import importlib

    timings: list[Timing] = []
    for name in modules:
        built, source = importlib.import_module(name), load_source(name)
        cases = {"compiled": CASES[name](built), "pure": CASES[name](source)}
        rows = [Timing(name, case_name, [], []) for case_name, _, _ in cases["pure"]]
        for round_index in range(rounds):
            order = ("pure", "compiled") if round_index % 2 == 0 else ("compiled", "pure")
            for index, row in enumerate(rows):
                for build in order:
                    _, run, messages = cases[build][index]
                    getattr(row, build).append(per_message(run, messages, seconds))
        timings.extend(rows)
    return timings


def document(timings: list[Timing], rounds: int, seconds: float) -> dict[str, Any]:
    return {"rounds": rounds, "seconds_per_case": seconds, "cases": [
        {"module": row.module, "case": row.case, "pure_us": spread(row.pure), "compiled_us": spread(row.compiled)}
        for row in timings]}


def write_table(doc: dict[str, Any], out: TextIO) -> None:
    out.write(f"µs per message, min/median/max over {doc['rounds']} rounds; gain = pure median / compiled median\n")
    module = None
    for case in doc["cases"]:
        if case["module"] != module:
            module = case["module"]
            out.write(f"\n{module}\n")
        pure, built = case["pure_us"], case["compiled_us"]
        out.write(f"  {case['case']:<52} pure {pure[0]:7.3f} {pure[1]:7.3f} {pure[2]:7.3f}   "
                  f"compiled {built[0]:7.3f} {built[1]:7.3f} {built[2]:7.3f}   gain {pure[1] / built[1]:5.2f}x\n")


def compiled_modules(requested: list[str] | None) -> list[str]:
    """The modules to time: those asked for (all listed by default) that run compiled here; ValueError if none."""
    import importlib

    names = requested or list(COMPILED_MODULES)
    unknown = [name for name in names if name not in CASES]
    if unknown:
        raise ValueError(f"no bench cases for {', '.join(unknown)} (known: {', '.join(CASES)})")
    running = [name for name in names if is_compiled(importlib.import_module(name))]
    if not running:
        raise ValueError("none of these modules runs compiled here (see fyrehose --version)")
    return running
