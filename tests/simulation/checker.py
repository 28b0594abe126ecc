"""The history checker: what the clients were told, against the pair's promises (docs/operations.md).

It reads only the :class:`~tests.simulation.world.History`: the number each
CONFIRM gave, every event each subscriber's tracker released (messages in
order, ranges reported lost), which backbone process sent client output
in which epoch, a number a driver would have refused to send (issued beyond
its state file: the real backbone stops), the numbers CONFIRMed while the other
host's backbone was dead and the backbones killed; never the backbones' own
view of themselves.
"""
from __future__ import annotations

from fyrehose.protocol.tracker import GONE_LOST, GONE_NEVER_SENT, Lost, Message
from tests.simulation.world import History

STALL_BOUND = 2.0  # seconds: after the faults end, a confirmed message reaches every subscriber within this


def check(history: History, *, sync: bool, probe: bytes, healed: float, end: float) -> list[str]:
    """Every promise broken, one line each (an empty list: the run holds)."""
    problems: list[str] = [f"{host}: sequence {seq} issued at {when:.3f}s beyond the reservation {covered} (the "
                           f"backbone stops there)" for when, host, seq, covered in history.uncovered]
    numbers: dict[int, bytes] = {}

    def issued(seq: int, payload: bytes, where: str) -> None:
        earlier = numbers.setdefault(seq, payload)
        if earlier != payload:
            problems.append(f"number {seq} issued twice: {earlier!r} and {payload!r} ({where})")

    for payload, seq in history.confirmed.items():
        issued(seq, payload, "confirmed")
    for name, events in history.received.items():
        position: int | None = None
        payloads: dict[bytes, int] = {}
        for when, event in events:
            first, last = (event.seq, event.seq) if isinstance(event, Message) else (event.from_seq, event.to_seq)
            if position is not None and first != position + 1:
                problems.append(f"{name}: after {position} came {first}..{last} at {when:.3f}s (a silent gap or "
                                f"out of order)")
            position = last
            if isinstance(event, Message):
                issued(event.seq, event.data, name)
                if event.data in payloads and sync:
                    problems.append(f"{name}: {event.data!r} delivered as {payloads[event.data]} and {event.seq}")
                payloads[event.data] = event.seq
        problems += _confirmed_kept(history, name, events, sync)
        problems += _stalls(history, name, events, healed, end)
    if probe not in history.confirmed:
        problems.append(f"the probe published after the faults ended was not confirmed (keepalived: "
                        f"{history.transitions[-6:]})")
    for name, events in history.received.items():
        if probe in history.confirmed and not any(isinstance(e, Message) and e.data == probe for _, e in events):
            problems.append(f"{name}: the probe, confirmed at {history.confirm_times[probe]:.3f}s, never arrived")
    for epoch, acting in sorted(history.acting_epochs.items()):
        if len(acting) > 1:
            problems.append(f"epoch {epoch}: {len(acting)} processes sent client output: {sorted(acting)}")
    return problems


def _confirmed_kept(history: History, name: str, events: list, sync: bool) -> list[str]:
    """Sync: every confirmed message within the subscriber's span was delivered; async: or reported lost."""
    if not events:
        return [f"{name} received nothing"]
    first = events[0][1]
    start = first.seq if isinstance(first, Message) else first.from_seq
    delivered = {event.seq: event.data for _, event in events if isinstance(event, Message)}
    lost = [event for _, event in events if isinstance(event, Lost)]
    problems = []
    last = events[-1][1]
    position = last.seq if isinstance(last, Message) else last.to_seq
    for payload, seq in history.confirmed.items():
        if seq < start or seq > position or delivered.get(seq) == payload:  # (beyond: the stall check's)
            continue
        if seq in delivered:
            continue  # a different payload: reported as a number issued twice
        within = next((gap for gap in lost if gap.from_seq <= seq <= gap.to_seq), None)
        if within is None:
            problems.append(f"{name}: confirmed {payload!r} (number {seq}) neither delivered nor reported lost")
        elif sync and not (within.reason == GONE_LOST and history.confirmed_alone.get(seq) in history.killed):
            # (a number CONFIRMed while the other host's backbone was dead, by a backbone killed since, was on that
            # one host only: two failures, which sync mode does not cover; reported lost, as in async mode)
            problems.append(f"{name}: confirmed {payload!r} (number {seq}) lost in sync mode ({within.reason})")
        elif within.reason == GONE_NEVER_SENT:
            problems.append(f"{name}: confirmed {payload!r} (number {seq}) reported never sent")
    return problems


def _stalls(history: History, name: str, events: list, healed: float, end: float) -> list[str]:
    """Once the faults ended, nothing confirmed waits longer than STALL_BOUND for a subscriber, and no hole
    is given up (a give-up is a wait of the whole give-up time)."""
    problems = []
    arrived = {event.data: when for when, event in events if isinstance(event, Message)}
    lost = [event for _, event in events if isinstance(event, Lost)]
    for payload, confirmed_at in history.confirm_times.items():
        if confirmed_at < healed or confirmed_at > end - STALL_BOUND:
            continue  # during the faults, or too late to tell
        seq = history.confirmed[payload]
        if any(gap.from_seq <= seq <= gap.to_seq for gap in lost):
            # a retry CONFIRMed from memory with the number it got during the faults, reported lost then: nothing
            # to wait for (whether that loss was allowed is _confirmed_kept's to say: never in sync mode)
            continue
        when = arrived.get(payload)
        if when is None or when - confirmed_at > STALL_BOUND:
            problems.append(f"{name}: {payload!r}, confirmed at {confirmed_at:.3f}s, "
                            + ("never arrived" if when is None else f"arrived {when - confirmed_at:.3f}s later"))
    for when, event in events:
        if isinstance(event, Lost) and event.reason not in (GONE_LOST, GONE_NEVER_SENT) and when >= healed:
            problems.append(f"{name}: {event.from_seq}..{event.to_seq} given up at {when:.3f}s ({event.reason})")
    return problems


def worst_stall(history: History, healed: float) -> float:
    """The longest a message confirmed after the heal waited for a subscriber (seconds)."""
    worst = 0.0
    for events in history.received.values():
        arrived = {event.data: when for when, event in events if isinstance(event, Message)}
        for payload, confirmed_at in history.confirm_times.items():
            if confirmed_at >= healed and payload in arrived:
                worst = max(worst, arrived[payload] - confirmed_at)
    return worst
