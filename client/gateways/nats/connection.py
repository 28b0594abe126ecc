"""One NATS client's connection to the gateway: its operations mapped to backbone subjects, its replies.

NATS subjects are backbone subjects as they are, and NATS wildcards (``*``,
``>``) are the backbone's, so a subscription is matched with
:class:`fyrehose.subjects.patterns.SubjectIndex`.  A reply subject travels in the
envelope's ``reply`` field, which is all request/reply needs: a requester's
``_INBOX.<nuid>.*`` subscription here receives whatever any client anywhere
publishes to its inbox, and ``_SNAP.<subject>`` requests are answered by the
cache node the same way.  The header block of an HPUB travels in the
envelope's ``headers`` field byte for byte (status line, repeated names and
all) and reaches every client that announced header support as an HMSG with
exactly that block; clients without header support, and Redis or Marlin
subscribers, get the payload alone, as nats-server does.  A message whose
envelope type or status is not the default (a cache answer: INITIAL,
NOT_FOUND) reaches header clients as an HMSG with ``Fyrehose-Type`` and
``Fyrehose-Status`` headers, after the fields of its own header block if it
has a well-formed one (a snapshot answer's ``Fyrehose-Sequence``).

No responders: a PUB or HPUB with a reply subject, from a client whose
CONNECT asked for ``headers`` and ``no_responders`` (nats-py, nats.js and
nats.go do by default), to a subject that no subscription anywhere in the
deployment matches, is answered at once with the status message nats-server
sends (``HMSG <reply> <sid> 16 16`` and ``NATS/1.0 503``), on each of the
client's own subscriptions that match the reply subject.  Anywhere means this
gateway's clients plus the interest every other gateway and subscribing
client announced (:mod:`fyrehose.subjects.interest`).  The message is still published
(the journal keeps it), as nats-server would accept it.

With ``verbose`` the ``+OK`` of a PUB is sent once the backbone confirmed the
message; in any mode the PONG to a PING follows the confirmation of every PUB
received before that PING.

Pure: :meth:`NatsConnection.receive` takes the client's bytes and leaves what
to write in :attr:`NatsConnection.outbox` and the PUB batches to publish in
:attr:`NatsConnection.requests` (:mod:`fyrehose.gateways.requests`).  A client
promised nothing about its PUBs (neither ``verbose`` nor ``echo: false``) is
read on while they are confirmed, at most ``MAX_IN_FLIGHT`` messages ahead;
replies after a PUB (the PONG) are held until it is confirmed.  For the
others an operation after a PUB waits for its confirmation, as the client
expects (``+OK`` before what follows; no own message echoed).  Every client gets the checks of ``pedantic``
mode: a subject the backbone cannot carry (a wildcard or an empty token in a
PUB subject) is refused with ``-ERR 'Invalid Publish Subject'`` rather than
dropped.

With ``--users`` (:mod:`fyrehose.gateways.nats.authorization`) INFO says
``auth_required`` unless the file has an anonymous user; a CONNECT's
credential is verified off the loop (a ``Verify`` request) and nothing
more is read from the client until the verdict; a refused client gets
``-ERR 'Authorization Violation'`` and is closed, as is one whose first
operation is not CONNECT when there is no anonymous user.  A publish or
subscription outside the user's rights gets nats-server's ``Permissions
Violation`` error and goes no further (a refused PUB never reaches the
backbone); the connection stays open.  Without ``--users`` none of this is
looked at: a CONNECT's credentials are ignored, as nats-server ignores them
when it has no authorization.
"""
from __future__ import annotations

import itertools
import random
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from fyrehose.gateways.access.login import Login, Outcome
from fyrehose.gateways.access.users import User
from fyrehose.gateways.channels import is_internal, pattern_is_internal
from fyrehose.gateways.echo import EchoFilter, HeldTooMuch
from fyrehose.gateways.liveness import HANDSHAKE_TIMEOUT, PING, STALE, NatsLiveness
from fyrehose.gateways.nats import protocol as proto
from fyrehose.gateways.nats.authorization import (
    AUTHORIZATION_VIOLATION,
    NatsAuthorization,
    auth_required,
    publish_violation,
    subscription_violation,
    withdrawn_subscription,
)
from fyrehose.gateways.nats.msg_frame import msg_tail, plain_fields
from fyrehose.gateways.outbox import Outbox, Slot
from fyrehose.gateways.payloads import PreparedHeads, encoded, fitting
from fyrehose.gateways.receiving import ParsingConnection
from fyrehose.gateways.requests import Deployment, Publish, Verify
from fyrehose.protocol.codec import MAX_PAYLOAD, PayloadTooLarge
from fyrehose.subjects.envelope import MAX_SUBJECT, Envelope, EnvelopeError, MsgType, Status, check_subject
from fyrehose.subjects.patterns import SubjectIndex, check_pattern, match

SERVER_VERSION = "2.10.0"  # the nats-server release whose client protocol this gateway follows
MAX_SUBSCRIPTIONS = 10000  # per client
MAX_REACHED = 4096  # subjects whose subscriptions are kept between changes of the index
MAX_IN_FLIGHT = 16384  # PUBs of one client submitted and not yet confirmed before its reading pauses
NO_RESPONDERS = b"NATS/1.0 503\r\n\r\n"  # the status-only header block nats-server answers with
# the largest payload that fits one backbone message whatever its subject and reply subject
# (an HPUB's size counts its header block too, which the envelope prefixes with 4 bytes of length)
ANNOUNCED_MAX_PAYLOAD = MAX_PAYLOAD - (8 + MAX_SUBJECT + 2 + MAX_SUBJECT + 4)


def server_info(server_id: str, host: str, port: int, *, tls: bool = False, tls_verify: bool = False) -> dict:
    """The INFO fields every client of this gateway gets (each adds its own client_id and client_ip, and
    ``auth_required`` when it must log in).  ``tls``: the connection turns to TLS after INFO (or before it, in
    the handshake-first mode); ``tls_verify``: a client certificate is required."""
    info = {
        "server_id": server_id,
        "server_name": "fyrehose-nats-gateway",
        "version": SERVER_VERSION,
        "proto": 1,
        "go": "python (fyrehose gateway)",
        "host": host,
        "port": port,
        "headers": True,
        "max_payload": ANNOUNCED_MAX_PAYLOAD,
    }
    if tls:
        info["tls_required"] = True
    if tls_verify:
        info["tls_verify"] = True
    return info


@dataclass(eq=False)
class NatsSubscription:
    connection: NatsConnection
    sid: str
    subject: str
    queue: str | None
    sid_bytes: bytes = b""
    max_msgs: int | None = None
    delivered: int = 0
    filtered: bool = False  # it overlaps a subscribe deny: each subject delivered is asked first

    def __post_init__(self) -> None:
        self.sid_bytes = self.sid.encode()


class NatsRoutes:
    """Every local subscription, by subject pattern; the subscriptions a subject reaches, kept until one changes."""

    def __init__(self, stats: Counter) -> None:
        self.index: SubjectIndex[NatsSubscription] = SubjectIndex()
        self.stats = stats
        self.heads: PreparedHeads[str] = PreparedHeads(_publish_subject)  # every client's plain PUBs build on them
        self._reached: dict[str, list[NatsSubscription]] = {}  # subject -> its lookup, until the index changes
        self._subjects: dict[bytes, str] = {}  # a plain message's subject as encoded -> as checked

    def add(self, subscription: NatsSubscription) -> None:
        self._reached.clear()
        self.index.add(subscription.subject, subscription)

    def discard(self, subscription: NatsSubscription) -> None:
        self._reached.clear()
        self.index.discard(subscription.subject, subscription)

    def lookup(self, subject: str) -> list[NatsSubscription]:
        """The subscriptions ``subject`` reaches (EnvelopeError when it is no subject)."""
        reached = self._reached.get(subject)
        if reached is None:
            if len(self._reached) >= MAX_REACHED:
                self._reached.clear()
            reached = self._reached[subject] = self.index.lookup(subject)
        return reached

    def wants(self, subject: str) -> bool:
        """Whether a message on ``subject`` reaches a subscription here (the router opens no other)."""
        try:
            return bool(self.lookup(subject))
        except EnvelopeError:  # a subject some raw publisher made up
            self.stats["bad subjects skipped"] += 1
            return False

    def route(self, seq: int, message: Envelope) -> None:
        try:
            subscriptions = self.lookup(message.subject)
        except EnvelopeError:
            self.stats["bad subjects skipped"] += 1
            return
        if subscriptions:
            self._fan_out(seq, subscriptions, MessageFrames.of(message))

    def route_plain(self, seq: int, data: bytes) -> bool:
        """Route a plain message from its encoded envelope, decoding no ``Envelope`` (:mod:`.msg_frame`).

        False, with nothing done, for any other envelope or one whose subject
        or reply the decoder would refuse: :meth:`route` gets it decoded.
        """
        if type(data) is not bytes:
            data = bytes(data)  # any other buffer as a copy, as the decoder takes it
        fields = plain_fields(data)
        if fields is None:
            return False
        raw_subject, raw_reply, start = fields
        subject = self._subjects.get(raw_subject)
        reply = None
        try:
            if subject is None:
                subject = raw_subject.decode()
                check_subject(subject)
                if len(self._subjects) >= MAX_REACHED:
                    self._subjects.clear()
                self._subjects[raw_subject] = subject
            if raw_reply is not None:
                reply = raw_reply.decode()
                check_subject(reply)
        except (UnicodeDecodeError, EnvelopeError):
            return False
        subscriptions = self.lookup(subject)  # a checked subject: no EnvelopeError
        if subscriptions:
            self._fan_out(seq, subscriptions, MessageFrames(subject, reply, data, start, None))
        return True

    def _fan_out(self, seq: int, subscriptions: list[NatsSubscription], frames: MessageFrames) -> None:
        groups: dict[str, list[NatsSubscription]] = {}
        for subscription in subscriptions:
            if subscription.queue is None:
                subscription.connection.deliver(seq, subscription, frames)
            else:
                groups.setdefault(subscription.queue, []).append(subscription)
        for members in groups.values():  # a queue group: one member, chosen at random
            chosen = random.choice(members)
            chosen.connection.deliver(seq, chosen, frames)


class MessageFrames:
    """One message's MSG and HMSG frames, built once for every subscription that gets it.

    Everything but the subscription's ``sid`` (prepared once per
    subscription) is the same for all of them: the part before the sid and
    the part after it are built on first use and each frame is one join.
    The payload is ``data[start:]``: an envelope's data (``start`` 0), or
    a plain message's encoded envelope as it came (:mod:`.msg_frame`).
    """

    __slots__ = ("subject", "reply", "data", "start", "headers", "_head", "_msg_tail", "_hmsg_tail")

    def __init__(self, subject: str, reply: str | None, data: bytes, start: int, headers: bytes | None) -> None:
        self.subject = subject
        self.reply = reply
        self.data = data
        self.start = start
        self.headers = headers
        self._head = b""
        self._msg_tail = b""
        self._hmsg_tail = b""

    @classmethod
    def of(cls, message: Envelope) -> MessageFrames:
        """The frames of a decoded message: its type and status as headers when they are not the default."""
        headers = message.headers
        if message.type != MsgType.UPDATE or message.status != Status.OK:
            kind = proto.header_block([("Fyrehose-Type", message.type.name), ("Fyrehose-Status", message.status.name)])
            if headers is None:
                headers = kind
            elif headers.startswith(b"NATS/1.0") and headers.endswith(b"\r\n\r\n"):
                headers = headers[:-2] + kind[len(b"NATS/1.0\r\n"):]
        return cls(message.subject, message.reply, message.data, 0, headers)

    def frame(self, sid: bytes, with_headers: bool) -> bytes:
        """The frame for subscription ``sid``: HMSG when the client takes headers and the message has some."""
        if with_headers and self.headers is not None:
            if not self._hmsg_tail:
                self._hmsg_tail = proto.hmsg_tail(self._reply(), self.headers, self.data[self.start:])
            return b"".join((b"H", self._subject_head(), sid, self._hmsg_tail))
        if not self._msg_tail:
            self._msg_tail = msg_tail(self.data, self.start, self._reply())
        return b"".join((self._subject_head(), sid, self._msg_tail))

    def _subject_head(self) -> bytes:
        if not self._head:
            self._head = b"MSG " + self.subject.encode() + b" "
        return self._head

    def _reply(self) -> bytes | None:
        return self.reply.encode() if self.reply else None


class NatsConnection(ParsingConnection[proto.OperationParser, proto.Operation | proto.NatsError]):
    """One NATS client: its CONNECT options and subscriptions; what it is told in :attr:`outbox`."""

    headroom = 0  # its farewell replaces what is queued: no room kept for it
    _ids = itertools.count(1)

    def __init__(self, routes: NatsRoutes, deployment: Deployment, stats: Counter, *, info: dict, peer: str,
                 liveness: NatsLiveness, max_held: int = 8 << 20, login: Login | None = None,
                 certificate: Callable[[], str | None] | None = None,
                 report: Callable[[str], None] | None = None) -> None:
        """``login``: the client's identity at a gateway with ``--users`` (None: every client may do everything);
        ``certificate``: the common name of its verified client certificate, which then names the user;
        ``report``: where a refusal worth a log line goes (at most one per address per second)."""
        self.outbox = Outbox()
        self.requests: list[Publish | Verify] = []
        self.liveness = liveness
        self.routes = routes
        self.deployment = deployment
        self.stats = stats
        self.id = next(self._ids)
        self.max_held = max_held  # bytes of messages held for the echo filter (the client's --max-pending)
        self.parser = proto.OperationParser(ANNOUNCED_MAX_PAYLOAD)  # refused past what INFO says, as nats-server does
        self.verbose = False
        self.headers = False
        self.no_responders = False
        self.echo: EchoFilter | None = None  # set when the client asked not to get its own messages
        self.subscriptions: dict[str, NatsSubscription] = {}
        self.last_input = liveness.accepted
        self.peer = peer
        self.report = report
        # the checks of --users; None (every right, nothing checked) keeps the path of a gateway without users as it was
        self.authorization = NatsAuthorization(login, certificate) if login is not None and login.access.required \
            else None
        self._verifying: int | None = None  # the token of the Verify request awaited: nothing is read meanwhile
        self._connect_answer = b""  # the +OK of a verbose CONNECT, once its credential is verified
        self._unread: deque[proto.Operation | proto.NatsError] = deque()  # parsed, waiting for a confirmation
        self._tokens = itertools.count(1)
        self._inflight: dict[int, tuple[list[Slot], int, bytes]] = {}  # token -> its replies' slots, messages, +OK or not
        self._inflight_messages = 0
        fields = info | {"client_id": self.id, "client_ip": peer.rpartition(":")[0]}
        if login is not None and auth_required(login.access):
            fields["auth_required"] = True
        self.outbox.reply(proto.info(fields))

    # ------------------------------------------------------------ the driver's interface

    @property
    def paused(self) -> bool:
        """Read nothing more for now: operations wait for a confirmation, or for a credential's verification."""
        return bool(self._unread) or self._inflight_messages >= MAX_IN_FLIGHT or self._verifying is not None

    @property
    def busy(self) -> bool:
        return bool(self._inflight) or self._verifying is not None

    def verified(self, token: int, user: User | None) -> None:
        """The result of the Verify request of a CONNECT's credential: the client is in, or refused and closed."""
        if token != self._verifying or self.authorization is None:
            return
        self._verifying = None
        if self.authorization.login.conclude(user, self.last_input) == Outcome.ACCEPTED:
            if self._connect_answer:
                self.outbox.reply(self._connect_answer)
        else:
            self._refuse_login("wrong credentials")
        self._run()

    def published(self, token: int, seqs: list[int]) -> None:
        self._done(token, seqs, None)

    def failed(self, token: int, reason: str) -> None:
        self._done(token, None, reason)

    def farewell(self, reason: str) -> bytes:
        return proto.error("Slow Consumer" if reason.startswith("slow consumer") else reason)

    def held(self) -> int:
        return self.parser.held

    def next_deadline(self) -> float | None:
        return self.liveness.next_deadline(self.last_input)

    def handle_timers(self, now: float) -> None:
        action = self.liveness.handle_timers(now, self.last_input)
        if action == PING:
            self.outbox.push(proto.PING)
        elif action == HANDSHAKE_TIMEOUT:
            self.stats["handshake timeouts"] += 1
            self.outbox.close_now("no CONNECT in time", proto.error("Authentication Timeout"))
        elif action == STALE:
            self.stats["stale connections"] += 1
            self.outbox.close_now("stale connection", proto.error("Stale Connection"))

    def closed(self) -> None:
        for subscription in self.subscriptions.values():
            self.routes.discard(subscription)
            self.deployment.interest.remove(subscription.subject)
        self.subscriptions.clear()
        self._unread.clear()

    def deliver(self, seq: int, subscription: NatsSubscription, frames: MessageFrames) -> None:
        if self.authorization is not None and not self._may_deliver(subscription, frames):
            return
        frame: bytes | None  # None once the echo filter holds it back (or it is the client's own)
        frame = frames.frame(subscription.sid_bytes, self.headers)
        if self.echo is not None:
            try:
                frame = self.echo.offer(seq, frame)
            except HeldTooMuch as exc:
                self.stats["slow consumers"] += 1
                self.outbox.close_now(f"slow consumer: {exc}", proto.error("Slow Consumer"))
                return
        if frame is not None:
            self.outbox.push(frame)
            self.stats["delivered"] += 1
        subscription.delivered += 1
        if subscription.max_msgs is not None and subscription.delivered >= subscription.max_msgs:
            self._drop(subscription)

    # ------------------------------------------------------------ operations, in order

    def _waits(self, operation: proto.Operation | proto.NatsError) -> bool:
        """Whether ``operation`` must wait for the PUBs before it to be confirmed."""
        if not self._inflight:
            return False
        if self._inflight_messages >= MAX_IN_FLIGHT or self.echo is not None:
            return True  # back-pressure; or the echo filter, which follows one batch at a time
        return self.verbose and operation.__class__ is not proto.Pub

    def _run(self) -> None:
        if self._verifying is not None:
            return
        if self.authorization is not None and self.authorization.reloaded():
            self._recheck()
        unread, outbox = self._unread, self.outbox
        batch: list[bytes] = []
        slots: list[Slot] = []
        while unread and outbox.closing is None:
            operation = unread[0]
            if not batch and self._waits(operation):
                break
            if operation.__class__ is proto.Pub:
                unread.popleft()
                result = self._publish(operation)
                if result.__class__ is _Refusal:
                    if result.fatal:
                        self._fatal(result.message)
                        break
                    outbox.reply(proto.error(result.message))
                    continue
                if self.verbose or not slots:
                    slots.append(outbox.hold())  # its +OK (verbose), or the batch's place: what follows waits
                batch.append(result)  # type: ignore[arg-type]
                if operation.reply is not None and self.no_responders and not self._has_responders(operation.subject):
                    outbox.reply(self._no_responders(operation.reply))
                continue
            if batch:  # what was published before this operation is submitted first
                self._submit(batch, slots)
                batch, slots = [], []
                continue  # it may have to wait for them
            unread.popleft()
            if operation.__class__ is proto.NatsError:
                self.stats["protocol errors"] += 1
                self._fatal(operation.message)
                break
            if self.authorization is not None and not self.liveness.connected \
                    and operation.__class__ is not proto.Connect and not self._enter_anonymously():
                self._fatal(AUTHORIZATION_VIOLATION)
                break
            answer = self._execute(operation)  # type: ignore[arg-type]
            if answer.__class__ is _Refusal:
                self._fatal(answer.message)
                break
            if answer:
                outbox.reply(answer)  # type: ignore[arg-type]
            if self._verifying is not None:
                break  # the CONNECT's credential is being verified: what follows waits for the verdict
        if batch:
            self._submit(batch, slots)

    def _submit(self, batch: list[bytes], slots: list[Slot]) -> None:
        token = next(self._tokens)
        self._inflight[token] = (slots, len(batch), proto.OK if self.verbose else b"")
        self._inflight_messages += len(batch)
        if self.echo is not None:
            self.echo.publishing()
        self.requests.append(Publish(token, batch))

    def _done(self, token: int, seqs: list[int] | None, failure: str | None) -> None:
        entry = self._inflight.pop(token, None)
        if entry is None:
            return
        slots, count, answer = entry
        self._inflight_messages -= count
        if self.echo is not None:
            released = self.echo.published(seqs, self.deployment.position)
            for frame in released:
                self.outbox.push(frame)
            self.stats["delivered"] += len(released)
        if failure is None:
            for slot in slots:
                self.outbox.fill(slot, answer)
        else:
            self.stats["publish failures"] += count
            self.outbox.fill(slots[0], proto.error(f"Publish Failed: {failure}"), close="publish failed")
        self._run()

    def _fatal(self, message: str) -> None:
        """An error the connection cannot go on after: ``-ERR``, then close, behind the replies before it."""
        self._unread.clear()
        self.outbox.reply(proto.error(message))
        self.outbox.close(message)

    # ------------------------------------------------------------ operations

    def _publish(self, pub: proto.Pub) -> bytes | _Refusal:
        """The payload to publish, or why not."""
        plain = pub.reply is None and pub.headers is None
        try:
            if plain:  # the subject checked once, when its head was prepared
                head = self.routes.heads.get(pub.subject)[1]
            else:
                check_subject(pub.subject)
                if pub.reply is not None:
                    check_subject(pub.reply)
        except EnvelopeError:
            self.stats["invalid publish subjects"] += 1
            return _Refusal("Invalid Publish Subject", fatal=False)
        if is_internal(pub.subject):
            self.stats["permission violations"] += 1
            return _Refusal(publish_violation(pub.subject), fatal=False)
        if self.authorization is not None:
            if not self.liveness.connected and not self._enter_anonymously():
                return _Refusal(AUTHORIZATION_VIOLATION)
            if not self.authorization.may_publish(pub.subject):
                self._refused("publishes refused", f"publish to {pub.subject!r}")
                return _Refusal(publish_violation(pub.subject), fatal=False)
        try:
            if plain:
                return fitting(head + pub.payload)
            return encoded(Envelope(pub.subject, pub.payload, reply=pub.reply, headers=pub.headers))
        except PayloadTooLarge:
            return _Refusal("Maximum Payload Violation")

    def _has_responders(self, subject: str) -> bool:
        return bool(self.routes.lookup(subject)) or self.deployment.subscribers_elsewhere(subject) > 0

    def _no_responders(self, reply: str) -> bytes:
        """The 503 status message, on each of this client's subscriptions that match ``reply``."""
        self.stats["no responders"] += 1
        subject = reply.encode()
        return b"".join(proto.hmsg(subject, subscription.sid_bytes, None, NO_RESPONDERS, b"")
                        for subscription in self.subscriptions.values() if match(subscription.subject, reply))

    def _execute(self, operation: proto.Operation) -> bytes | _Refusal:
        if isinstance(operation, proto.Ping):
            return proto.PONG
        if isinstance(operation, proto.Pong):
            self.liveness.pong()
            return b""
        if isinstance(operation, proto.Connect):
            return self._connect(operation.options)
        if isinstance(operation, proto.Sub):
            return self._subscribe(operation)
        return self._unsubscribe(operation)  # type: ignore[arg-type]  # the only operation left is Unsub

    def _connect(self, options: dict) -> bytes | _Refusal:
        self.liveness.connect()
        if options.get("echo") is False:
            self.echo = EchoFilter(self.max_held)
        self.verbose = bool(options.get("verbose"))
        self.headers = bool(options.get("headers"))
        self.no_responders = self.headers and bool(options.get("no_responders"))
        answer = proto.OK if self.verbose else b""
        if self.authorization is None:
            return answer  # credentials are not looked at, as nats-server without authorization does not
        outcome = self.authorization.log_in(options, self.last_input)
        if outcome == Outcome.ACCEPTED:
            return answer
        if isinstance(outcome, Outcome):
            self._log_refusal("login throttled" if outcome == Outcome.THROTTLED else "no valid credentials")
            return _Refusal(AUTHORIZATION_VIOLATION)
        token = next(self._tokens)
        self._verifying, self._connect_answer = token, answer
        users = self.authorization.login.access.users
        assert users is not None  # required: there are users
        self.requests.append(Verify(token, users, outcome))
        return b""

    def _subscribe(self, sub: proto.Sub) -> bytes | _Refusal:
        try:
            check_pattern(sub.subject)
        except EnvelopeError:
            return proto.error("Invalid Subject")
        if pattern_is_internal(sub.subject):
            self.stats["permission violations"] += 1
            return proto.error(subscription_violation(sub.subject, None))
        filtered = False
        if self.authorization is not None:
            login = self.authorization.login
            if not login.may_subscribe(sub.subject):
                self._refused("subscriptions refused", f"subscription to {sub.subject!r}")
                return proto.error(subscription_violation(sub.subject, sub.queue))
            user = login.user
            filtered = user is not None and user.subscribe.filters(sub.subject)
        previous = self.subscriptions.get(sub.sid)
        if previous is not None:
            self._drop(previous)
        elif len(self.subscriptions) >= MAX_SUBSCRIPTIONS:
            return proto.error("Maximum Subscriptions Exceeded")
        subscription = NatsSubscription(self, sub.sid, sub.subject, sub.queue, filtered=filtered)
        self.subscriptions[sub.sid] = subscription
        self.routes.add(subscription)
        self.deployment.interest.add(sub.subject)
        return proto.OK if self.verbose else b""

    def _unsubscribe(self, unsub: proto.Unsub) -> bytes:
        subscription = self.subscriptions.get(unsub.sid)
        if subscription is not None:
            if unsub.max_msgs and subscription.delivered < unsub.max_msgs:
                subscription.max_msgs = unsub.max_msgs
            else:
                self._drop(subscription)
        return proto.OK if self.verbose else b""

    def _drop(self, subscription: NatsSubscription) -> None:
        if self.subscriptions.get(subscription.sid) is subscription:
            del self.subscriptions[subscription.sid]
            self.routes.discard(subscription)
            self.deployment.interest.remove(subscription.subject)

    # ------------------------------------------------------------ --users

    def _enter_anonymously(self) -> bool:
        """An operation before any CONNECT: the anonymous user's, as nats-server's ``no_auth_user``, if there is one."""
        login = self._authorization.login
        if login.allowed_in:
            self.liveness.connect()
            return True
        login.access.stats["logins refused"] += 1
        self._log_refusal("an operation before CONNECT, and no anonymous user")
        return False

    def _refuse_login(self, why: str) -> None:
        self._log_refusal(why)
        self._fatal(AUTHORIZATION_VIOLATION)

    def _log_refusal(self, why: str) -> None:
        login = self._authorization.login
        if self.report is not None and login.access.log.allow(login.address, self.last_input):
            self.report(f"{self.peer} refused: {why}")

    def _refused(self, counter: str, what: str) -> None:
        """A publish or subscription outside the user's rights: counted, and logged at most once a second."""
        login = self._authorization.login
        if login.access.refused(counter, login.address, self.last_input) and self.report is not None:
            self.report(f"{self.peer} (user {login.name}) refused a {what}: outside its rights")

    def _may_deliver(self, subscription: NatsSubscription, message: MessageFrames) -> bool:
        """Whether the user may receive ``message`` on ``subscription`` (then a request it may answer)."""
        authorization = self._authorization
        if authorization.reloaded():
            self._recheck()
            if self.outbox.closing is not None or self.subscriptions.get(subscription.sid) is not subscription:
                return False
        if subscription.filtered and not authorization.login.may_receive(message.subject):
            return False
        if message.reply:
            authorization.requested(message.reply)
        return True

    def _recheck(self) -> None:
        """The users file was re-read: a client whose user is gone is refused, subscriptions no longer
        permitted are withdrawn (and the client told, as nats-server's reload does)."""
        login = self._authorization.login
        user = login.user
        if user is None:
            if self.outbox.closing is None:
                self._refuse_login("its user is no longer in the users file")
            return
        for subscription in list(self.subscriptions.values()):
            if login.may_subscribe(subscription.subject):
                subscription.filtered = user.subscribe.filters(subscription.subject)
            else:
                self._drop(subscription)
                self.outbox.push(proto.error(withdrawn_subscription(subscription.subject, subscription.sid)))

    @property
    def _authorization(self) -> NatsAuthorization:
        """The checks of --users (only called where they are on)."""
        assert self.authorization is not None
        return self.authorization


@dataclass(frozen=True)
class _Refusal:
    """An ``-ERR`` for the client; fatal ones end the connection, as nats-server does."""

    message: str
    fatal: bool = field(default=True)


def _publish_subject(subject: str) -> str:
    """``subject`` itself, once it is one a client may publish to (EnvelopeError if not)."""
    check_subject(subject)
    return subject
