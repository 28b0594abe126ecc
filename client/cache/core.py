"""The last-value cache as a pure state machine (docs/subjects.md, "Record semantics: types and statuses").

:meth:`Cache.receive` takes every envelope of the ordered stream (already
authenticated by the driver) and returns the envelopes to publish: answers on
requesters' inboxes, ``drop``/``nosubscribers`` when a subject's last
subscriber leaves, ``drop``/``preempted`` when the memory bound evicts a
record.  :meth:`Cache.poll` runs the session timers.  Because every cache sees
the same sequenced stream, two caches fed the same stream hold the same records.

Record semantics (the cache's reading of the type/status table):

- ``initial``: replaces the record and its status (so it clears ``stale``);
  ``initial``/``not_found`` removes the record.
- ``update``: merges into the record (:mod:`fyrehose.cache.merge`), creating
  it if absent.  Its status becomes the record's, except that a *sticky*
  status (``stale``, ``feed_down``, ``temp_unavail``, ``bad_access``,
  ``bad_name``, ``perm_denied``) stays until an ``initial`` or ``verify``
  replaces it: the cache cannot know which field is out of date.
- ``verify``: merges and sets its status (``ok`` clears sticky ones); on a
  missing record it creates one with status ``verify`` ("reinitialized").
- ``transient``: a status without data; changes the status as an update does.
- ``drop``: ``expired`` (and any status without its own rule) removes the
  record; ``relocate`` (data = the new subject) moves the value to the new
  subject and leaves a redirect answered with ``drop``/``relocate``;
  ``nosubscribers`` and ``preempted`` (another manager's notices) change nothing.

Requests: ``_SNAP.<subject>`` and ``_SUB.START.<subject>`` with a reply
subject under ``_INBOX.`` are answered there with type ``initial`` and the
record's status and value, or with ``not_found`` and no data (type ``snap``
for a snapshot, ``initial`` for a start).  A snapshot whose data asks for it
(:mod:`fyrehose.subjects.snapshots`) also gets the record's sequence: that of the
last message the record took in (the update, initial, verify or transient
that last set it, the last of conflated updates, or the relocation that moved
it), given with each envelope to :meth:`Cache.receive` by the driver, which
reads the stream in order.  :meth:`Cache.lost` turns records stale without a
message, so it leaves their sequences as they were.  ``_SUB.START`` with a
session also registers the subscription in the
:class:`~fyrehose.subjects.session_table.SessionTable`; ``_SUB.STOP`` and ``_SESSION.BYE``
end it, as does the end of the session's heartbeats.  Subjects whose first token starts with ``_`` are never cached.

Pending updates: most of a busy stream is plain updates (type ``update``, a
record status, no reply, session or digest).  :meth:`Cache.receive_messages`
reads only their header, which a memo of header prefixes (envelope start up
to the end of the subject) turns into the subject in one lookup, and appends
the raw payload to the record's pending list; the record also moves to the
most-recently-used end and takes the update's sequence, as it would have
applied it.  :meth:`Cache.receive_run` does the same for a datagram's run of
frames at once: the prefixes of all its payloads looked up together, and
each record's updates appended in one go.  The pending updates of a record are folded (each decoded once,
merged with :func:`~fyrehose.cache.merge.merge_many`, the result encoded
once) only when something reads or replaces the record: a request for it, any
other message about it (an ``initial`` or a removing ``drop`` discards them
unread), a relocation to or from it, a loss, :meth:`Cache.get`, or
MAX_PENDING of them; and while more than MAX_PENDING_UPDATES wait in all, the
record pending longest is folded, so that folding keeps pace a little at a
time instead of in bursts (updates round-robin over many subjects would
otherwise reach MAX_PENDING together).  Folding gives exactly the record
eager application would have left.  Evictions too: pending updates are taken lazily only while
LAZY_EXPANSION times the stored and pending bytes fit the memory bound (no
fold can then outgrow it, as re-encoding JSON grows no token more than
4.5-fold: ``1e15`` becomes ``1000000000000000.0``); nearer the bound every
record is folded and messages are applied one by one, evicting exactly when
they would.
"""
from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import repeat
from typing import cast

from fyrehose.cache.merge import merge, merge_many
from fyrehose.protocol.codec import MAX_PAYLOAD
from fyrehose.subjects import envelope as envelopes
from fyrehose.subjects.envelope import Envelope, EnvelopeError, MsgType, Status, check_subject, encode
from fyrehose.subjects.session_table import (
    BYE,
    HEARTBEAT,
    HELLO,
    INBOX_PREFIX,
    SNAP_PREFIX,
    SUB_START_PREFIX,
    SUB_STOP_PREFIX,
    Heartbeat,
    SessionTable,
    StartOptions,
    stop_wants_ack,
)
from fyrehose.subjects.snapshots import sequence_headers, wants_sequence

STICKY = frozenset({Status.STALE, Status.FEED_DOWN, Status.TEMP_UNAVAIL, Status.BAD_ACCESS, Status.BAD_NAME,
                    Status.PERM_DENIED})
RECORD_STATUSES = STICKY | {Status.OK, Status.VERIFY, Status.CONFLATED, Status.FEED_SWITCH}
RECORD_OVERHEAD = 256  # bytes charged per record on top of subject and value (the Python objects)
ANSWER_HEADROOM = 300  # session, seqno and digest the driver adds to an answer
MAX_PENDING = 256  # pending updates of one record before they are folded (a snapshot then folds at most these)
MAX_PENDING_UPDATES = 65_536  # pending updates in all, beyond which the record pending longest is folded
LAZY_EXPANSION = 5  # a fold re-encodes JSON, which can grow it up to 4.5-fold: pending only while 5 x bytes fit
KNOWN_PREFIXES = 100_000  # envelope header prefixes remembered for routing, at most (then forgotten at once)
_PLAIN_UPDATE = envelopes.MAGIC + bytes((envelopes.VERSION, MsgType.UPDATE))
_STATUS_AT, _FLAGS_AT, _SUBJECT_LENGTH_AT, _PLAIN_FIXED = 4, 5, 6, 8  # status, flags, subject length, subject
_STATUSES = tuple(Status)  # by value
_PLAIN_FLAGS = envelopes.FLAG_REPLY | envelopes.FLAG_SESSION | envelopes.FLAG_DIGEST  # version 1 reads no other bit


@dataclass(slots=True)
class Record:
    data: bytes
    status: Status
    relocated_to: str | None = None  # a redirect left by drop/relocate
    size: int = 0
    seq: int | None = None  # the backbone sequence of the message that last changed the record (None: not given)
    pending: list[bytes] | None = None  # plain updates' payloads not applied yet, oldest first
    pending_replace: bool = False  # the first pending update creates the record (``data`` holds nothing yet)


def is_cacheable(subject: str) -> bool:
    """Data subjects are cached; ``_INBOX``, ``_SESSION``, ``_SUB``, ``_SNAP`` and other ``_`` names are not."""
    return not subject.startswith("_")


class Cache:
    """Records per subject, bounded to ``max_bytes`` (least recently used evicted first)."""

    def __init__(self, max_bytes: int = 64 << 20, sessions: SessionTable | None = None) -> None:
        if max_bytes < 1:
            raise ValueError("max_bytes must be positive")
        self.max_bytes = max_bytes
        self.sessions = sessions if sessions is not None else SessionTable()
        self.records: OrderedDict[str, Record] = OrderedDict()
        self.bytes = 0
        self.stats: Counter[str] = Counter()
        self.pending_bytes = 0  # payloads and RECORD_OVERHEAD of every pending update
        self.pending_updates = 0
        self._pending: OrderedDict[str, None] = OrderedDict()  # subjects with pending updates, longest pending first
        self._plain: dict[bytes, str] = {}  # header prefix of a plain update -> its (checked, cacheable) subject
        self._known_subjects: dict[bytes, str] = {}  # subjects already checked when decoding

    def get(self, subject: str) -> Record | None:
        self._settle(subject)
        return self.records.get(subject)

    def settle(self) -> None:
        """Fold every pending update (what :attr:`records` then holds is what eager application leaves)."""
        for subject in list(self._pending):
            self._settle(subject)

    # ------------------------------------------------------------ input

    def receive(self, envelope: Envelope, now: float, seq: int | None = None) -> list[Envelope]:
        """One envelope of the stream; ``seq`` is its backbone sequence, kept by the record it changes."""
        subject = envelope.subject
        if self._pending:
            self._settle_for(envelope)
        if subject in (HELLO, HEARTBEAT):
            if envelope.session is not None:
                try:
                    interval: float | None = Heartbeat.decode(envelope.data).interval
                except ValueError:
                    interval = None
                self.sessions.heartbeat(envelope.session, interval, now)
            return []
        if subject == BYE:
            return self._nosubscribers(self.sessions.bye(envelope.session)) if envelope.session else []
        if subject.startswith(SNAP_PREFIX):
            return self._snapshot(envelope, subject[len(SNAP_PREFIX):])
        if subject.startswith(SUB_START_PREFIX):
            return self._start(envelope, subject[len(SUB_START_PREFIX):], now)
        if subject.startswith(SUB_STOP_PREFIX):
            return self._stop(envelope, subject[len(SUB_STOP_PREFIX):])
        if not is_cacheable(subject):
            self.stats["not cached"] += 1
            return []
        return self._apply(envelope, seq)

    def receive_many(self, envelopes: list[Envelope], now: float, seqs: list[int] | None = None) -> list[Envelope]:
        """:meth:`receive` for a batch, with the same records, statuses and answers as one by one.

        Consecutive ``update``s of one subject, with nothing else between them
        that reads or changes records (a request, an ``initial``, a ``drop``
        ...), are conflated: merged with :func:`~fyrehose.cache.merge.merge_many`
        and stored once.  Subjects are stored in the order of their last update,
        so the least-recently-used order is also the same; only evictions under
        the memory bound happen after a subject's conflated updates instead of
        after each of them.  ``seqs`` are the envelopes' backbone sequences
        (as many as envelopes); a conflated record keeps its last update's.
        """
        if seqs is not None and len(seqs) != len(envelopes):
            raise ValueError("one sequence per envelope")
        answers: list[Envelope] = []
        runs: dict[str, list[Envelope]] = {}  # subject -> its updates, in the order of each subject's last one
        last_seqs: dict[str, int | None] = {}  # subject -> the sequence of its last update in ``runs``
        for envelope, seq in zip(envelopes, seqs if seqs is not None else repeat(None)):
            subject = envelope.subject
            if envelope.type == MsgType.UPDATE and envelope.status in RECORD_STATUSES and is_cacheable(subject):
                run = runs.pop(subject, None)
                if run is None:
                    run = []
                run.append(envelope)
                runs[subject] = run
                last_seqs[subject] = seq
                continue
            if runs:
                answers += self._apply_runs(runs, last_seqs)
                runs = {}
                last_seqs = {}
            answers += self.receive(envelope, now, seq)
        if runs:
            answers += self._apply_runs(runs, last_seqs)
        return answers

    def _apply_runs(self, runs: dict[str, list[Envelope]], last_seqs: dict[str, int | None]) -> list[Envelope]:
        evicted: list[Envelope] = []
        for subject, updates in runs.items():
            self._settle(subject)
            self.stats["updates"] += len(updates)
            self.stats["conflated updates"] += len(updates) - 1
            record = self.records.get(subject)
            if record is None or record.relocated_to is not None:
                base, status, rest = updates[0].data, updates[0].status, updates[1:]
            else:
                base, status, rest = record.data, record.status, updates
            for update in rest:
                status = _status_after_update(status, update.status)
            evicted += self._store(subject, merge_many(base, [update.data for update in rest]) if rest else base,
                                   status, last_seqs[subject])
        return evicted

    def receive_messages(self, messages: Iterable[tuple[int, bytes]], now: float) -> list[Envelope]:
        """The stream's (backbone sequence, payload) pairs in order: the records and answers :meth:`receive`
        gives for each decoded envelope (raw payloads are no cache input and are skipped).

        A plain update whose header prefix is known only becomes pending (the
        module's "Pending updates"); anything else is decoded and applied at
        once, after the pending updates it concerns are folded.
        """
        answers: list[Envelope] = []
        plain = self._plain
        pending_subjects = self._pending
        overhead, max_pending = RECORD_OVERHEAD, MAX_PENDING
        room = self._lazy_room()
        left = MAX_PENDING_UPDATES - self.pending_updates  # more pending updates before the longest pending is folded
        updates = 0
        for seq, payload in messages:
            key = _header_prefix(payload)
            subject = plain.get(key)
            if subject is not None:
                cost = len(payload) + overhead
                if cost > room:
                    self.settle()
                    room = self._lazy_room()
                    left = MAX_PENDING_UPDATES
                if cost <= room:
                    pending = self._pending_list(subject, seq)
                    pending.append(payload)
                    self.pending_bytes += cost
                    self.pending_updates += 1
                    room -= cost
                    left -= 1
                    updates += 1
                    if len(pending) >= max_pending or left < 0:
                        self._settle(subject if left >= 0 else next(iter(pending_subjects)))
                        left = MAX_PENDING_UPDATES - self.pending_updates  # folding a little at a time, not in bursts
                        room = self._lazy_room()
                    continue
            opened = envelopes.decode(payload, self._known_subjects)
            if opened is None:
                if envelopes.is_envelope(payload):
                    self.stats["damaged envelopes"] += 1
                continue
            if len(self._known_subjects) > KNOWN_PREFIXES:
                self._known_subjects.clear()
            if subject is None and _is_plain(payload, opened):  # applied now, taken as pending from the next one on
                if len(plain) >= KNOWN_PREFIXES:
                    plain.clear()
                plain[bytes(key)] = opened.subject
            if pending_subjects and len(payload) + overhead > room:
                self.settle()  # near the memory bound: applied as one by one, evicting exactly then
            answers += self.receive(opened, now, seq)
            room = self._lazy_room()
            left = MAX_PENDING_UPDATES - self.pending_updates
        if updates:
            self.stats["updates"] += updates
        return answers

    def receive_run(self, first: int, payloads: list[bytes], now: float) -> list[Envelope]:
        """:meth:`receive_messages` of payloads with the consecutive sequences ``first``, ``first + 1``, ... (a
        datagram's run of frames), with the same records, statuses, order, sequences, evictions and answers.

        The header prefixes of the whole run are looked up at once; each stretch of plain updates whose prefixes
        are all known is taken by :meth:`_take_plain_run`, the messages between stretches by
        :meth:`receive_messages`.
        """
        plain = self._plain
        fixed, length_at = _PLAIN_FIXED, _SUBJECT_LENGTH_AT
        try:  # _header_prefix written out: a call per payload costs this path about 7 %
            keys = [payload[:fixed + (payload[length_at] << 8 | payload[length_at + 1])] for payload in payloads]
        except IndexError:  # one shorter than an envelope's fixed part
            keys = list(map(_header_prefix, payloads))
        subjects = list(map(plain.get, keys))
        answers: list[Envelope] = []
        start, count = 0, len(payloads)
        while start < count:
            try:
                end = subjects.index(None, start)
            except ValueError:
                end = count
            if end > start:  # subjects[start:end] holds no None: end is the first None at or after start
                answers += self._take_plain_run(first + start, cast(list[str], subjects[start:end]),
                                                payloads[start:end], now)
            stop = end
            while stop < count and subjects[stop] is None:
                stop += 1
            if stop > end:
                known = len(plain)
                answers += self.receive_messages(zip(range(first + end, first + stop), payloads[end:stop]), now)
                if len(plain) < known:  # the memo was full and forgotten: later stretches are looked up again
                    subjects[stop:] = map(plain.get, keys[stop:])
            start = stop
        return answers

    def _take_plain_run(self, first: int, subjects: list[str], payloads: list[bytes], now: float) -> list[Envelope]:
        """Plain updates of known ``subjects`` with the sequences ``first``, ``first + 1``, ...: all pending at once
        when they fit the lazy room together, otherwise one by one through :meth:`receive_messages`.

        Each update is taken as :meth:`receive_messages` takes it, without its checks after every update: the
        room is checked once for the run, and a record that reaches MAX_PENDING is folded only after the run (it
        may then hold more, by the run's updates of it: MAX_PENDING is a rough bound), as is the record pending
        longest while more than MAX_PENDING_UPDATES wait.  Folding later leaves the same records.
        """
        count = len(payloads)
        cost = sum(map(len, payloads)) + RECORD_OVERHEAD * count
        if cost > self._lazy_room():
            return self.receive_messages(zip(range(first, first + count), payloads), now)
        pending_list, max_pending = self._pending_list, MAX_PENDING
        full: list[str] = []  # subjects whose records reached MAX_PENDING (some more than once)
        for subject, seq, payload in zip(subjects, range(first, first + count), payloads):
            pending = pending_list(subject, seq)
            pending.append(payload)
            if len(pending) >= max_pending:
                full.append(subject)
        self.pending_bytes += cost
        self.pending_updates += count
        self.stats["updates"] += count
        for subject in full:
            self._settle(subject)
        while self.pending_updates > MAX_PENDING_UPDATES:
            self._settle(next(iter(self._pending)))
        return []

    def _pending_list(self, subject: str, seq: int) -> list[bytes]:
        """The pending list to append a plain update of ``subject`` with sequence ``seq`` to, its record left as
        applying the update would: created if missing (or replacing a redirect), at the most-recently-used end,
        with the update's sequence."""
        record = self.records.get(subject)
        if record is None:
            record = self.records[subject] = Record(b"", Status.OK, pending_replace=True)
        else:
            self.records.move_to_end(subject)
        record.seq = seq
        pending = record.pending
        if pending is None:
            pending = record.pending = []
            self._pending[subject] = None
            if record.relocated_to is not None:  # the update replaces a redirect
                record.relocated_to, record.data, record.pending_replace = None, b"", True
        return pending

    def _lazy_room(self) -> int:
        """Bytes of pending updates (payload and RECORD_OVERHEAD each) that may still be taken lazily."""
        return self.max_bytes // LAZY_EXPANSION - self.bytes - self.pending_bytes

    def _settle_for(self, envelope: Envelope) -> None:
        """Before ``envelope`` is applied: fold the pending updates it reads, discard those it replaces."""
        subject = envelope.subject
        if subject.startswith(SNAP_PREFIX):
            self._settle(subject[len(SNAP_PREFIX):])
            return
        if subject.startswith(SUB_START_PREFIX):
            self._settle(subject[len(SUB_START_PREFIX):])
            return
        kind, status = envelope.type, envelope.status
        if subject in self._pending:
            if (kind == MsgType.INITIAL and (status in RECORD_STATUSES or status == Status.NOT_FOUND)) or (
                    kind == MsgType.DROP and status not in (Status.NOSUBSCRIBERS, Status.PREEMPTED, Status.RELOCATE)):
                self._take_pending(subject)  # the record is replaced or removed: what was pending no longer matters
            else:
                self._settle(subject)
        if kind == MsgType.DROP and status == Status.RELOCATE:
            try:
                self._settle(envelope.data.decode())
            except UnicodeDecodeError:
                pass

    def _take_pending(self, subject: str) -> tuple[Record, list[bytes]]:
        del self._pending[subject]
        record = self.records[subject]
        payloads = record.pending or []
        record.pending = None
        self.pending_bytes -= sum(map(len, payloads)) + RECORD_OVERHEAD * len(payloads)
        self.pending_updates -= len(payloads)
        return record, payloads

    def _settle(self, subject: str) -> None:
        """Apply the record's pending updates: one decode each, one merge, one encode."""
        if subject not in self._pending:
            return
        record, payloads = self._take_pending(subject)
        self.stats["conflated updates"] += len(payloads) - 1
        raw_subject = len(subject.encode())
        offset = _PLAIN_FIXED + raw_subject  # every payload has this subject and no optional field
        if record.pending_replace:
            record.pending_replace = False
            data, status, rest = payloads[0][offset:], _STATUSES[payloads[0][_STATUS_AT]], payloads[1:]
        else:
            data, status, rest = record.data, record.status, payloads
        incoming = [_STATUSES[payload[_STATUS_AT]] for payload in rest]
        if not STICKY.isdisjoint(incoming):
            for value in incoming:
                status = _status_after_update(status, value)
        elif incoming and status not in STICKY:  # nothing sticky comes: the last status holds unless one stays
            status = incoming[-1]
        if rest:
            data = merge_many(data, [payload[offset:] for payload in rest])
        record.data, record.status = data, status
        size = raw_subject + len(data) + RECORD_OVERHEAD
        self.bytes += size - record.size
        record.size = size

    def poll(self, now: float) -> list[Envelope]:
        """Timers: subscriptions of sessions whose heartbeats stopped."""
        return self._nosubscribers(self.sessions.expire(now))

    def next_deadline(self) -> float | None:
        return self.sessions.next_deadline()

    def lost(self) -> None:
        """The driver's stream lost messages: every record may have missed updates, so all turn stale."""
        self.stats["losses"] += 1
        self.settle()
        for record in self.records.values():
            if record.relocated_to is None and record.status not in STICKY:
                record.status = Status.STALE

    # ------------------------------------------------------------ requests

    def _request_target(self, target: str) -> bool:
        if target and is_cacheable(target):
            return True
        self.stats["bad requests"] += 1
        return False

    def _reply_to(self, envelope: Envelope) -> str | None:
        """The inbox to answer on; anything else is refused so nobody can make the cache publish on data subjects."""
        if envelope.reply is None:
            return None
        if not envelope.reply.startswith(INBOX_PREFIX):
            self.stats["bad reply subjects"] += 1
            return None
        return envelope.reply

    def _snapshot(self, envelope: Envelope, target: str) -> list[Envelope]:
        reply = self._reply_to(envelope)
        if not self._request_target(target):
            return []
        if reply is None:
            self.stats["snapshots without inbox"] += 1
            return []
        self.stats["snapshots"] += 1
        return [self._answer(target, reply, MsgType.SNAP, wants_sequence(envelope.data))]

    def _start(self, envelope: Envelope, target: str, now: float) -> list[Envelope]:
        if not self._request_target(target):
            return []
        try:
            options = StartOptions.decode(envelope.data)
        except ValueError:
            self.stats["bad requests"] += 1
            return []
        self.stats["starts"] += 1
        if envelope.session is not None:
            self.sessions.start(envelope.session, target, options.expires, now)
        reply = self._reply_to(envelope)
        answers = []
        if reply is not None:
            if options.ack:
                answers.append(Envelope(reply, b"", MsgType.START, Status.ACK))
            if options.initial:
                answers.append(self._answer(target, reply, MsgType.INITIAL))
        return answers

    def _stop(self, envelope: Envelope, target: str) -> list[Envelope]:
        if not self._request_target(target):
            return []
        try:
            ack = stop_wants_ack(envelope.data)
        except ValueError:
            self.stats["bad requests"] += 1
            return []
        self.stats["stops"] += 1
        answers = self._nosubscribers(self.sessions.stop(envelope.session, target) if envelope.session else [])
        reply = self._reply_to(envelope)
        if ack and reply is not None:
            answers.append(Envelope(reply, b"", MsgType.STOP, Status.ACK))
        return answers

    def _answer(self, target: str, reply: str, not_found_type: MsgType, with_sequence: bool = False) -> Envelope:
        record = self.records.get(target)
        if record is None:
            return Envelope(reply, b"", not_found_type, Status.NOT_FOUND)
        self.records.move_to_end(target)
        headers = sequence_headers(record.seq) if with_sequence and record.seq is not None else None
        if record.relocated_to is not None:
            return Envelope(reply, record.relocated_to.encode(), MsgType.DROP, Status.RELOCATE, headers=headers)
        answer = Envelope(reply, record.data, MsgType.INITIAL, record.status, headers=headers)
        if len(encode(answer)) > MAX_PAYLOAD - ANSWER_HEADROOM:  # the inbox may be longer than the subject
            self.stats["answers too large"] += 1
            return Envelope(reply, b"", MsgType.INITIAL, Status.TEMP_UNAVAIL)
        return answer

    def _nosubscribers(self, subjects: list[str]) -> list[Envelope]:
        self.stats["nosubscribers sent"] += len(subjects)
        return [Envelope(subject, b"", MsgType.DROP, Status.NOSUBSCRIBERS) for subject in subjects]

    # ------------------------------------------------------------ records

    def _apply(self, envelope: Envelope, seq: int | None) -> list[Envelope]:
        kind, status, subject = envelope.type, envelope.status, envelope.subject
        record = self.records.get(subject)
        live = record if record is not None and record.relocated_to is None else None
        if kind == MsgType.DROP:
            return self._drop(envelope, live, seq)
        if kind not in (MsgType.UPDATE, MsgType.INITIAL, MsgType.VERIFY, MsgType.TRANSIENT):
            self.stats["not cache input"] += 1  # snap/start/stop belong on inboxes and request subjects
            return []
        if kind == MsgType.INITIAL and status == Status.NOT_FOUND:
            self.stats["initials"] += 1
            self._remove(subject)
            return []
        if status not in RECORD_STATUSES:
            self.stats["bad status"] += 1
            return []
        self.stats[f"{kind.name.lower()}s"] += 1
        if kind == MsgType.INITIAL:
            return self._store(subject, envelope.data, status, seq)
        if kind == MsgType.TRANSIENT:
            if live is not None:
                live.status, live.seq = _status_after_update(live.status, status), seq
            return []
        if live is None:
            return self._store(subject, envelope.data, Status.VERIFY if kind == MsgType.VERIFY else status, seq)
        new_status = status if kind == MsgType.VERIFY else _status_after_update(live.status, status)
        return self._store(subject, merge(live.data, envelope.data), new_status, seq)

    def _drop(self, envelope: Envelope, live: Record | None, seq: int | None) -> list[Envelope]:
        status, subject = envelope.status, envelope.subject
        self.stats[f"drop {status.name.lower()} received"] += 1
        if status in (Status.NOSUBSCRIBERS, Status.PREEMPTED):
            return []
        if status != Status.RELOCATE:
            self._remove(subject)
            return []
        try:
            target = envelope.data.decode()
            check_subject(target)
        except (UnicodeDecodeError, EnvelopeError):
            self.stats["bad relocations"] += 1
            return []
        if target == subject or not is_cacheable(target):
            self.stats["bad relocations"] += 1
            return []
        moved: list[Envelope] = []
        existing = self.records.get(target)
        if live is not None and (existing is None or existing.relocated_to is not None):
            moved = self._store(target, live.data, live.status, seq)
        self._remove(subject)
        return moved + self._put(subject, Record(b"", Status.OK, target, seq=seq))

    def _store(self, subject: str, data: bytes, status: Status, seq: int | None) -> list[Envelope]:
        return self._put(subject, Record(data, status, seq=seq))

    def _put(self, subject: str, record: Record) -> list[Envelope]:
        self._remove(subject)
        payload = len(record.data) + len(record.relocated_to or "")
        record.size = len(subject.encode()) + payload + RECORD_OVERHEAD
        self.records[subject] = record
        self.bytes += record.size
        if self.bytes > self.max_bytes and self._pending:
            self.settle()  # evictions go by what the records hold (receive_messages never gets here with any pending)
        evicted = []
        while self.bytes > self.max_bytes and self.records:
            victim, old = self.records.popitem(last=False)
            self.bytes -= old.size
            self.stats["preempted sent"] += 1
            evicted.append(Envelope(victim, b"", MsgType.DROP, Status.PREEMPTED))
        return evicted

    def _remove(self, subject: str) -> None:
        record = self.records.pop(subject, None)
        if record is not None:
            self.bytes -= record.size


def _header_prefix(payload: bytes) -> bytes:
    """The envelope's start up to the end of its subject, which routes a plain update (b"": shorter than the
    fixed part, never a known prefix)."""
    if len(payload) < _PLAIN_FIXED:
        return b""
    return payload[:_PLAIN_FIXED + (payload[_SUBJECT_LENGTH_AT] << 8 | payload[_SUBJECT_LENGTH_AT + 1])]


def _is_plain(payload: bytes, opened: Envelope) -> bool:
    """Whether ``payload`` (opened as ``opened``) is a plain update: its header prefix then routes the same
    prefix lazily (type update, a record status, version 1 without reply, session or digest, a cached subject)."""
    return (payload[:len(_PLAIN_UPDATE)] == _PLAIN_UPDATE and not payload[_FLAGS_AT] & _PLAIN_FLAGS
            and opened.status in RECORD_STATUSES and is_cacheable(opened.subject))


def _status_after_update(current: Status, incoming: Status) -> Status:
    if incoming in STICKY or current not in STICKY:
        return incoming
    return current
