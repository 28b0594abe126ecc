"""A client's side of the backbone protocol as a pure state machine: datagrams and time in, actions out.

What a client must decide about every datagram (is it from the backbone, is
this KEEPALIVE-ACK an answer to one of our tokens, is this DELIVER for a hole
we asked for, is this FORWARD a repeat) and about time (when to send the next
KEEPALIVE, which holes to REQUEST, which to give up) lives here, with no
socket, thread or clock of its own, in the shape of
:class:`fyrehose.backbone.core.Backbone`.  :class:`fyrehose.Client` is its
thread driver; tests drive it directly with a manual clock and an in-memory
network (tests/memnet.py).
"""
from __future__ import annotations

import os
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from fyrehose.protocol import codec
from fyrehose.protocol.admission import admit
from fyrehose.protocol.codec import Address
from fyrehose.protocol.frame_run import FrameRun
from fyrehose.protocol.in_order import continuing_step
from fyrehose.protocol.multicast import FALLBACK_INTERVALS, GroupWatch
from fyrehose.protocol.publishing import CONFIRM_RETRY, Finished, PendingPublishes
from fyrehose.protocol.tracker import DEFAULT_TRACKER_OPTIONS, Event, SequenceTracker, TrackerOptions

_BACKBONE_ITSELF = "0.0.0.0"  # a FORWARD naming it (port 0): the backbone re-DELIVERs the range (FLAG_REDELIVERING)
TOKENS_REMEMBERED = 8  # KEEPALIVE tokens whose ACK still counts (several keepalives may be in flight)


@dataclass(slots=True, init=False)
class Incoming:
    """What one datagram asks of the driver, in the order it must be applied."""

    stored: list[tuple[int, bytes]]  # new DELIVERs (no duplicates), to store
    runs: list[FrameRun]  # DeliverForm.*_RUNS: in order, to store and release
    events: list[Event]  # ordered messages and losses, for subscriptions
    confirms: list[codec.Run]  # (first tag, count, first sequence) from CONFIRMs
    published: list[Finished]  # publish batches those CONFIRMs completed
    forwards: list[codec.Forward]  # REQUESTs to answer from the store
    acked: bool  # a KEEPALIVE-ACK for one of our tokens arrived
    from_backbone: bool  # the datagram came from the backbone (not a peer's re-delivery)
    fell_back: bool  # the multicast group went silent: unicast from now on (say so once, leave the group)

    def __init__(self, stored: list[tuple[int, bytes]] | None = None, runs: list[FrameRun] | None = None,
                 events: list[Event] | None = None, *, from_backbone: bool = False) -> None:
        """Written out rather than generated: one is made per datagram, and the dataclass's own ``__init__`` (a
        default factory called per list) cost the in-order datagram 0.1 µs more (docs/benchmarks.md)."""
        self.stored = [] if stored is None else stored
        self.runs = [] if runs is None else runs
        self.events = [] if events is None else events
        self.confirms = []
        self.published = []
        self.forwards = []
        self.acked = False
        self.from_backbone = from_backbone
        self.fell_back = False


KEEPALIVE_INTERVAL = 0.5  # seconds between KEEPALIVEs, by default (docs/protocol.md, client rule 1: at most 1 s)
SILENCE_INTERVALS = 1.5  # an ACK this many intervals after the last one ends a silence: unconfirmed PUSHes go again
COOKIE_UNANSWERED = 4  # keepalive intervals without an answer after which KEEPALIVEs go without the cookie again
_KNOWN_FLAGS = (codec.FLAG_NOSUBSCRIBE | codec.FLAG_NOJOURNAL | codec.FLAG_BATCH | codec.FLAG_HEAD
                | codec.FLAG_MULTICAST | codec.FLAG_REDELIVERING)  # GONE is the connection's own, always set


class DeliverForm(Enum):
    """What a datagram of the backbone's DELIVERs that continues the stream becomes in :class:`Incoming`.

    Whatever the form, a datagram that does not continue the stream (a hole
    before it, a re-delivery, a peer's answer) is taken message by message.
    """

    MESSAGES = "messages"  # its messages, one by one, in Incoming.events (and .stored)
    UNIFORM_RUNS = "uniform runs"  # one FrameRun in Incoming.runs when its frames are of one size, else messages
    ANY_RUNS = "any runs"  # one FrameRun in Incoming.runs whatever its frame sizes (step 0 when they vary)


@dataclass(frozen=True, slots=True)
class ConnectionOptions:
    """How a :class:`BackboneConnection` talks to the backbone, checked when made.

    ``flags`` are the KEEPALIVE flags (codec.FLAG_*, MULTICAST excepted:
    ``multicast`` sets it).  A client without NOJOURNAL serves FORWARDs (they
    go out in ``Incoming.forwards``); one with it ignores them, counted.
    ``confirm_retry``: the first wait before an unconfirmed message is sent
    again (``connection.publishes``).  ``tracker``: the ordering's timing
    (:class:`~fyrehose.protocol.tracker.TrackerOptions`).

    ``delivers`` (:class:`DeliverForm`): a backbone datagram that continues
    the stream goes out as messages, or whole as one
    :class:`~fyrehose.protocol.frame_run.FrameRun` (stored and released as it
    is) for a driver that accounts per datagram: runs of one frame size (the
    load test's subscribers), or of any (the client's subscriptions).  With
    ``buffer_runs`` too, a datagram of one frame size that arrives while a hole
    is open waits whole in the tracker and later comes out, in order, among
    ``Incoming.events`` (the journal): the events may then hold FrameRuns.

    ``multicast``: the driver joined the backbone's multicast group (see
    :func:`fyrehose.net.group_socket.join_group`) and feeds what arrives there
    to :meth:`BackboneConnection.receive_group`; the KEEPALIVEs carry MULTICAST
    (and HEAD) until the group goes silent while HEAD advances for
    ``multicast_fallback_after`` seconds (None: FALLBACK_INTERVALS keepalive
    intervals), then the connection falls back to unicast.
    """

    flags: int
    keepalive_interval: float = KEEPALIVE_INTERVAL
    confirm_retry: float = CONFIRM_RETRY
    tracker: TrackerOptions = DEFAULT_TRACKER_OPTIONS
    delivers: DeliverForm = DeliverForm.MESSAGES
    buffer_runs: bool = False
    multicast: bool = False
    multicast_fallback_after: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.flags, int) or self.flags & ~_KNOWN_FLAGS:
            raise ValueError(f"flags {self.flags!r}: not a combination of codec.FLAG_*")
        if self.flags & codec.FLAG_MULTICAST:
            raise ValueError("FLAG_MULTICAST is the connection's to set and clear: give multicast=True instead")
        if not 0 < self.keepalive_interval <= 1.0:
            raise ValueError("keepalive_interval must be in (0, 1] seconds (docs/protocol.md, client rule 1)")
        if not self.confirm_retry > 0:
            raise ValueError(f"confirm_retry must be more than 0 seconds, not {self.confirm_retry!r}")
        if not isinstance(self.tracker, TrackerOptions):
            raise ValueError(f"tracker must be a TrackerOptions, not {type(self.tracker).__name__}")
        if not isinstance(self.delivers, DeliverForm):
            raise ValueError(f"delivers must be a DeliverForm, not {self.delivers!r}")
        if self.buffer_runs and self.delivers is DeliverForm.MESSAGES:
            raise ValueError("buffer_runs needs delivers=UNIFORM_RUNS or ANY_RUNS: "
                             "a datagram taken as messages leaves no run to buffer")
        if self.multicast and self.flags & codec.FLAG_NOSUBSCRIBE:
            raise ValueError("multicast needs a subscriber: with FLAG_NOSUBSCRIBE no DELIVER comes, "
                             "from the group or otherwise")
        if self.multicast_fallback_after is not None:
            if not self.multicast:
                raise ValueError("multicast_fallback_after needs multicast=True: "
                                 "only a group member falls back to unicast")
            if not self.multicast_fallback_after > 0:
                raise ValueError(f"multicast_fallback_after must be more than 0 seconds, "
                                 f"not {self.multicast_fallback_after!r}")

    @property
    def serves_forwards(self) -> bool:
        """Whether FORWARDs are passed on: only a journaling client (no NOJOURNAL) is sent any."""
        return not self.flags & codec.FLAG_NOJOURNAL


class BackboneConnection:
    """One client's protocol state towards one backbone, as ``options`` (:class:`ConnectionOptions`) say.

    ``token_source`` makes KEEPALIVE tokens (random in use, deterministic in
    tests); ``stats`` counts what was dropped and why (the driver's own
    Counter, or a new one).  ``vouch`` judges the payload of a peer's
    re-delivery before it may fill a requested hole (an authenticating client
    takes only what verifies); a payload it refuses leaves the hole open, to
    be requested again.  :attr:`publishes` matches the CONFIRMs to what this
    client published; :class:`~fyrehose.subjects.client_core.ClientCore` runs both timers.
    A multicast connection that falls back to unicast says so in
    :attr:`Incoming.fell_back`, counted as ``multicast fallbacks``.

    Address validation (docs/protocol.md) needs no option: a validating
    backbone answers a KEEPALIVE it may not serve yet with a COOKIE, which the
    connection echoes in every KEEPALIVE from then on (the next one goes at
    once), and takes the fresh cookie a later ACK brings.  A connection whose
    backbone answered nothing for COOKIE_UNANSWERED keepalive intervals sends
    its KEEPALIVEs without the cookie, as a base-protocol client does, until a
    backbone asks for one again.
    """

    def __init__(self, backbone: Address, options: ConnectionOptions, *,
                 token_source: Callable[[int], bytes] = os.urandom, stats: Counter[str] | None = None,
                 vouch: Callable[[bytes], bool] | None = None) -> None:
        self.backbone = backbone
        self.options = options
        # the KEEPALIVEs' flags: MULTICAST comes and goes; every connection takes GONE (after a takeover)
        self.flags = options.flags | codec.FLAG_GONE
        self.group_watch: GroupWatch | None = None
        self._head: int | None = None  # the backbone's last HEAD
        self._head_at_track: int | None = None  # the HEAD when tracking began: later messages are the stream's
        if options.multicast:
            self.flags |= codec.FLAG_MULTICAST | codec.FLAG_HEAD  # the fallback watches HEAD
            fallback_after = options.multicast_fallback_after
            self.group_watch = GroupWatch(fallback_after if fallback_after is not None
                                          else FALLBACK_INTERVALS * options.keepalive_interval)
        self.keepalive_interval = options.keepalive_interval
        self.serves_forwards = options.serves_forwards
        self.stats: Counter[str] = stats if stats is not None else Counter()
        self.tracker: SequenceTracker | None = None
        self.last_ack: float | None = None
        self._token_source = token_source
        self._vouch = vouch
        # the options the hot paths ask per datagram, as plain attributes
        self.whole_datagrams = options.delivers is not DeliverForm.MESSAGES  # in-order runs go out as FrameRuns
        self.buffer_runs = options.buffer_runs  # runs beyond a hole wait whole (events may hold FrameRuns)
        self.varied_runs = options.delivers is DeliverForm.ANY_RUNS  # runs of frames of varied sizes too (step 0)
        self.publishes = PendingPublishes(retry=options.confirm_retry, stats=self.stats)
        self._tokens: deque[bytes] = deque(maxlen=TOKENS_REMEMBERED)
        self._next_keepalive = 0.0
        self._cookie = b""  # the backbone's cookie for our address, echoed in every KEEPALIVE
        self._cookie_answered = 0.0  # when the backbone last answered a KEEPALIVE (an ACK or a COOKIE)
        self._queued_forwards: set[codec.Forward] = set()

    # ------------------------------------------------------------ tracking

    def track(self, from_seq: int | None = None) -> SequenceTracker:
        """Start ordering the stream (from ``from_seq``, or whatever arrives first); idempotent."""
        if self.tracker is None:
            self.tracker = SequenceTracker(from_seq, self.options.tracker)
            self._head_at_track = self._head
        return self.tracker

    def reachable(self, now: float, unreachable_after: float) -> bool:
        return self.last_ack is not None and now - self.last_ack < unreachable_after

    # ------------------------------------------------------------ time

    def handle_timers(self, now: float) -> tuple[list[bytes], list[Event]]:
        """Timers: datagrams to send the backbone now (KEEPALIVE, REQUESTs) and events from given-up holes."""
        out: list[bytes] = []
        if now >= self._next_keepalive:
            token = self._token_source(codec.TOKEN_SIZE)
            self._tokens.append(token)
            out.append(codec.encode(codec.Keepalive(flags=self.flags, token=token, cookie=self._echo(now))))
            self._next_keepalive = now + self.keepalive_interval
        tracker = self.tracker
        if tracker is None:
            return out, []
        requests, events = tracker.handle_timers(now)
        for from_seq, to_seq in requests:
            out.append(codec.encode(codec.Request("0.0.0.0", 0, from_seq, to_seq)))
        self.stats["requests"] += len(requests)
        return out, events

    def goodbye(self) -> bytes:
        """The last datagram a driver sends the backbone: a KEEPALIVE with NOSUBSCRIBE and NOJOURNAL, which stops
        DELIVERs and FORWARDs to this client at once rather than after its 5 s lifetime (with the cookie, which a
        validating backbone needs to take it)."""
        return codec.encode(codec.Keepalive(flags=codec.FLAG_NOSUBSCRIBE | codec.FLAG_NOJOURNAL,
                                            token=self._token_source(codec.TOKEN_SIZE), cookie=self._cookie))

    def _echo(self, now: float) -> bytes:
        """The cookie to echo: none once the backbone has been silent for COOKIE_UNANSWERED intervals (it may have
        been replaced by one that takes no cookies; a validating one asks again)."""
        if self._cookie and now - self._cookie_answered > COOKIE_UNANSWERED * self.keepalive_interval:
            self._cookie = b""
            self.stats["cookies dropped"] += 1
        return self._cookie

    def next_deadline(self) -> float:
        """When :meth:`handle_timers` or ``publishes.handle_timers`` next has something to do."""
        deadline = min(self._next_keepalive, self.publishes.next_deadline())
        if self.tracker is not None:
            tracker_deadline = self.tracker.next_deadline()
            if tracker_deadline is not None:
                deadline = min(deadline, tracker_deadline)
        return deadline

    # ------------------------------------------------------------ datagrams

    def receive(self, data: bytes, source: Address, now: float) -> Incoming:
        """One datagram, whatever its bytes or sender: what it asks for, or nothing (dropped and counted)."""
        tracker = self.tracker
        if tracker is not None and source == self.backbone:
            expected = tracker.next
            if expected is not None:
                step = continuing_step(data, expected)
                if step:
                    continued = self._continue(data, step, expected, tracker)
                    if continued is not None:
                        return continued
        incoming = Incoming()
        kind, from_backbone, drop = admit(data, source, self.backbone)
        incoming.from_backbone = from_backbone
        if drop:
            self.stats[drop] += 1
            return incoming
        if kind == codec.DELIVER:
            self._deliver(data, now, from_backbone, incoming)
            return incoming
        try:
            if kind == codec.CONFIRM:
                incoming.confirms = codec.decode_confirm_runs(data)
                incoming.published = self.publishes.confirm_runs(incoming.confirms)
                return incoming
            if kind == codec.COOKIE:
                self._take_cookie(codec.decode_cookie(data), now)
                self._next_keepalive = now  # echo it at once: the backbone serves us from that KEEPALIVE on
                return incoming
            if kind == codec.GONE:
                from_seq, to_seq, reason = codec.decode_gone(data)
                self.stats["gone notices"] += 1
                if self.tracker is not None:
                    incoming.events = self.tracker.gone(from_seq, to_seq, reason == codec.GONE_NEVER_SENT, now)
                return incoming
            frames = codec.decode(data)
        except codec.ProtocolError:
            self.stats["malformed"] += 1
            return incoming
        if kind == codec.KEEPALIVE_ACK:
            ack = frames[0]
            if isinstance(ack, codec.KeepaliveAck) and ack.token in self._tokens:
                if self.last_ack is not None and now - self.last_ack > SILENCE_INTERVALS * self.keepalive_interval:
                    self.stats["backbone answers again"] += 1
                    self.publishes.retry_now(now)
                self.last_ack = now
                incoming.acked = True
                if ack.cookie:
                    self._take_cookie(ack.cookie, now)
                elif self._cookie:
                    self._cookie_answered = now
                if ack.head is not None:
                    self._head = ack.head
                    if self.group_watch is not None and self.group_watch.head(ack.head, now):
                        self._fall_back(now, incoming)
                if ack.head and self.tracker is not None:
                    self.tracker.head(ack.head, now)
            else:
                self.stats["unknown tokens"] += 1
        elif kind == codec.FORWARD:
            forward = frames[0]
            if not isinstance(forward, codec.Forward):
                self.stats["malformed"] += 1
            elif forward.port == 0 and forward.addr == _BACKBONE_ITSELF:  # the REDELIVERING notice
                self.stats["redelivery notices"] += 1
                if self.tracker is not None:
                    self.tracker.backbone_answers(forward.from_seq, forward.to_seq, now)
            elif not self.serves_forwards:
                self.stats["forwards ignored"] += 1
            elif forward in self._queued_forwards:  # a retried REQUEST: the first answer is on its way
                self.stats["duplicate forwards"] += 1
            else:
                self._queued_forwards.add(forward)
                incoming.forwards.append(forward)
        return incoming

    def _continue(self, data: bytes, step: int, first: int, tracker: SequenceTracker) -> Incoming | None:
        """The commonest datagram of all (:func:`~fyrehose.protocol.in_order.continuing_step` recognised it): the
        backbone's frames of one size that continue the stream, taken in one step; None when the tracker has a
        hole open or messages buffered (the general path takes it then)."""
        count = len(data) // step
        if self.whole_datagrams:
            if not tracker.advance(first, count):
                return None
            incoming = Incoming(runs=[FrameRun(first, count, step, data)], from_backbone=True)
        else:
            header = codec.FRAME_HEADER
            payloads = [data[start + header:start + step] for start in range(0, len(data), step)]
            messages = tracker.deliver_run(first, payloads)
            if messages is None:
                return None
            incoming = Incoming(stored=list(zip(range(first, first + count), payloads)), events=messages,
                                from_backbone=True)
        self.stats["delivered frames"] += count
        return incoming

    def _take_cookie(self, cookie: bytes, now: float) -> None:
        """A cookie from the backbone (whoever's KEEPALIVE it answers: it came to our address, so it is ours)."""
        self._cookie = cookie
        self._cookie_answered = now
        self.stats["cookies"] += 1

    def receive_group(self, data: bytes, source: Address, now: float) -> Incoming:
        """One datagram from the multicast group's socket: only the backbone's DELIVERs count (docs/protocol.md)."""
        if source != self.backbone:
            self.stats["multicast from strangers"] += 1  # forged, or another sender on the group
            return Incoming()
        if not data or data[0] != codec.DELIVER:
            self.stats["multicast non-DELIVERs"] += 1
            return Incoming(from_backbone=True)
        if self.group_watch is not None:
            last = _last_sequence(data)
            if last:
                self.group_watch.datagram(last)
        self.stats["multicast datagrams"] += 1
        return self.receive(data, source, now)

    def _fall_back(self, now: float, incoming: Incoming) -> None:
        """Unicast from now on: a KEEPALIVE without MULTICAST at once, so the backbone resumes sending."""
        self.flags &= ~codec.FLAG_MULTICAST
        self._next_keepalive = now
        tracker, group = self.tracker, self.group_watch
        if tracker is not None and tracker.next is None and group is not None and group.high is not None:
            # tracking began but the group never brought its first message: the stream starts after the
            # HEAD of that moment, and the REQUESTs for what HEAD announces since fetch it all
            start = self._head_at_track if self._head_at_track is not None else group.high
            self.tracker = SequenceTracker(start + 1, self.options.tracker)
        self.stats["multicast fallbacks"] += 1
        incoming.fell_back = True

    def forward_done(self, forward: codec.Forward) -> None:
        """The driver answered (or dropped) ``forward``: a later REQUEST for it is served again."""
        self._queued_forwards.discard(forward)

    def _deliver(self, data: bytes, now: float, from_backbone: bool, incoming: Incoming) -> None:
        if from_backbone and self.tracker is not None and self._deliver_uniform_run(data, self.tracker, incoming, now):
            return
        spans, error = codec.scan(data, codec.DELIVER)
        if error:
            self.stats["malformed"] += 1
        tracker = self.tracker
        header = codec.FRAME_HEADER
        stored = incoming.stored
        events = incoming.events
        if from_backbone and tracker is not None and spans and self._deliver_run(data, spans, error, tracker, incoming):
            return
        if tracker is not None and spans and (from_backbone or self._vouch is None) and self._fill_run(
                data, spans, from_backbone, tracker, incoming, now):
            return
        for start, end, seq in spans:
            if not seq:
                self.stats["malformed"] += 1
                continue
            if not from_backbone and (tracker is None or not tracker.awaits(seq)):
                self.stats["DELIVERs from strangers"] += 1  # not a hole we asked for: forged or stale
                continue
            payload = data[start + header:end]
            if not from_backbone and self._vouch is not None and not self._vouch(payload):
                self.stats["unverified re-deliveries"] += 1  # forged or tampered: the hole stays open
                continue
            if tracker is None:
                stored.append((seq, payload))
                continue
            duplicates = tracker.duplicates
            events.extend(tracker.deliver(seq, payload, now))
            if tracker.duplicates == duplicates:  # a copy already stored is not stored again
                stored.append((seq, payload))
        self.stats["delivered frames"] += len(spans)

    def _deliver_uniform_run(self, data: bytes, tracker: SequenceTracker, incoming: Incoming, now: float) -> bool:
        """The commonest case of all without a scan: frames of one size whose numbers continue the stream, or
        (while a hole is open) lie beyond everything seen."""
        step = codec.uniform_step(data, codec.DELIVER)
        if not step:
            return False
        count = len(data) // step
        first = codec.consecutive_u48(data, 3, step, count)
        if not first:
            return False
        if self.whole_datagrams:
            if tracker.advance(first, count):
                incoming.runs.append(FrameRun(first, count, step, data))
                self.stats["delivered frames"] += count
                return True
            if self.buffer_runs and (released := tracker.buffer_run(FrameRun(first, count, step, data), now)) is not None:
                incoming.events.extend(released)
                self.stats["delivered frames"] += count
                return True
        header = codec.FRAME_HEADER
        payloads = [data[start + header:start + step] for start in range(0, len(data), step)]
        if self._take_run(first, payloads, tracker, incoming):
            return True
        events = tracker.deliver_ahead(first, payloads, now)
        if events is None:
            return False
        incoming.stored.extend(zip(range(first, first + count), payloads))
        incoming.events.extend(events)
        self.stats["delivered frames"] += count
        return True

    def _deliver_run(self, data: bytes, spans: list[tuple[int, int, int]], error: str | None,
                     tracker: SequenceTracker, incoming: Incoming) -> bool:
        """The common case in one step: the backbone's DELIVERs continue the stream without a gap."""
        first = codec.consecutive_first(spans)
        count = len(spans)
        if not first:
            return False
        if self.varied_runs and error is None and tracker.advance(first, count):
            incoming.runs.append(FrameRun(first, count, 0, data, spans))
            self.stats["delivered frames"] += count
            return True
        header = codec.FRAME_HEADER
        return self._take_run(first, [data[start + header:end] for start, end, _ in spans], tracker, incoming)

    def _fill_run(self, data: bytes, spans: list[tuple[int, int, int]], from_backbone: bool,
                  tracker: SequenceTracker, incoming: Incoming, now: float) -> bool:
        """Re-DELIVERs filling holes (an answer to a REQUEST), one step per hole instead of per frame; a peer's
        frames are taken only for holes REQUESTed.  False when they are not consecutive or reach beyond the
        highest sequence seen."""
        first = codec.consecutive_first(spans)
        if not first:
            return False
        header = codec.FRAME_HEADER
        payloads = [data[start + header:end] for start, end, _ in spans]
        filled = tracker.fill_run(first, payloads, now, requested=not from_backbone)
        if filled is None:
            return False
        events, taken = filled
        for low, high in taken:  # a copy already stored is not stored again
            incoming.stored.extend(zip(range(low, high + 1), payloads[low - first:high - first + 1]))
        incoming.events.extend(events)
        if not from_backbone:  # not a hole we asked for: forged or stale
            self.stats["DELIVERs from strangers"] += len(spans) - sum(high - low + 1 for low, high in taken)
        self.stats["delivered frames"] += len(spans)
        return True

    def _take_run(self, first: int, payloads: list[bytes], tracker: SequenceTracker, incoming: Incoming) -> bool:
        """Hand the tracker DELIVERs ``first``, ``first + 1``, ...; False when they do not continue the stream."""
        messages = tracker.deliver_run(first, payloads)
        if messages is None:
            return False
        incoming.stored.extend(zip(range(first, first + len(payloads)), payloads))
        incoming.events.extend(messages)
        self.stats["delivered frames"] += len(payloads)
        return True


def _last_sequence(data: bytes) -> int:
    """The sequence of a DELIVER datagram's last well-formed frame (0: none)."""
    step = codec.uniform_step(data, codec.DELIVER)
    if step:
        return int.from_bytes(data[len(data) - step + 3:len(data) - step + 9], "big")
    spans, _ = codec.scan(data, codec.DELIVER)
    return spans[-1][2] if spans else 0
