"""One Marlin PubSub client's connection to the gateway: channels on the backbone.

Each client SUBSCRIBEs and UNSUBSCRIBEs channels (answered with a RESPONSE:
OK with the channel as message, or ERROR with the reason) and publishes
MESSAGEs, which reach every *other* client subscribed to the channel, here
or behind any gateway, as MESSAGEs whose id is the backbone sequence number
(so ids increase in delivery order).  A publish gets no answer unless it
fails, which earns a RESPONSE ERROR naming the message id.  Channels map to
backbone subjects as :mod:`fyrehose.gateways.channels` says; the TCP framing
is in :mod:`fyrehose.gateways.marlin.protocol` and docs/gateways.md.

Pure: :meth:`MarlinConnection.receive` takes the client's bytes and leaves
what to write in :attr:`MarlinConnection.outbox` and the MESSAGEs to publish
in :attr:`MarlinConnection.requests`.  Consecutive MESSAGEs are one batch;
what follows them waits for its confirmation (the client's own messages are
kept from it by sequence number, :mod:`fyrehose.gateways.echo`, one batch at a
time), so the client is not read meanwhile (:attr:`MarlinConnection.paused`).

Marlin carries no login.  With ``--users`` a client is the user its TLS
client certificate names (``--tls-ca``), else the users file's anonymous
user; a client that is neither gets a RESPONSE ERROR and is closed before it
can send anything.  A SUBSCRIBE or MESSAGE outside the user's rights gets a
RESPONSE ERROR saying ``permission denied``, as the channels internal to the
deployment do; the connection stays open.
"""
from __future__ import annotations

import itertools
from collections import Counter, deque

from fyrehose.gateways.access.login import Login
from fyrehose.gateways.channels import (
    ChannelError,
    channel_to_subject,
    channel_to_subject_or_none,
    is_internal,
    subject_to_channel,
)
from fyrehose.gateways.echo import EchoFilter, HeldTooMuch
from fyrehose.gateways.marlin import protocol as proto
from fyrehose.gateways.outbox import Outbox, Slot
from fyrehose.gateways.payloads import PreparedHeads, fitting
from fyrehose.gateways.receiving import ParsingConnection
from fyrehose.gateways.requests import Deployment, Publish
from fyrehose.gateways.subscribers import ChannelSubscribers
from fyrehose.protocol.codec import PayloadTooLarge
from fyrehose.subjects.envelope import MAX_SUBJECT, Envelope

MAX_SUBSCRIPTIONS = 10000  # channels per client
MAX_FRAME = 1 << 20


class MarlinRoutes(ChannelSubscribers["MarlinConnection"]):
    """Which local clients subscribed to which channel."""

    def __init__(self) -> None:
        super().__init__()
        self.heads: PreparedHeads[bytes] = PreparedHeads(channel_to_subject)  # every client's MESSAGEs build on them

    def wants(self, subject: str) -> bool:
        """Whether a message on ``subject`` may reach a client here (the router opens no other)."""
        return subject in self.subjects

    def route(self, seq: int, message: Envelope) -> None:
        channel = subject_to_channel(message.subject)
        connections = self.channels.get(channel)
        if not connections or len(channel) > proto.MAX_CHANNEL:
            return
        frame = proto.message_frame(seq, channel, message.data)
        for connection in list(connections):
            connection.deliver(seq, frame, message.subject)


class MarlinConnection(ParsingConnection[proto.FrameParser, proto.Frame | proto.FrameError]):
    """One Marlin client: its channels and the publishes it is waiting on; what it is told in :attr:`outbox`."""

    headroom = 0  # its farewell replaces what is queued: no room kept for it
    def __init__(self, routes: MarlinRoutes, deployment: Deployment, stats: Counter, *,
                 max_held: int = 8 << 20, login: Login | None = None, refusal: str | None = None) -> None:
        self.outbox = Outbox()
        self.requests: list[Publish] = []
        self.routes = routes
        self.deployment = deployment
        self.stats = stats
        self.parser = proto.FrameParser(MAX_FRAME)
        self.channels: dict[bytes, None] = {}
        self.echo = EchoFilter(max_held)  # bytes held for an unconfirmed publish (the client's --max-pending)
        self._unread: deque[proto.Frame | proto.FrameError] = deque()  # parsed, waiting for a confirmation
        self._tokens = itertools.count(1)
        self._inflight: tuple[int, Slot, list[int]] | None = None  # token, its slot, the message ids
        self.login = login  # None without --users: every right
        if refusal is not None:  # not placed (:func:`place`): told why, closed, nothing read
            self.outbox.close_now(refusal, error_response(refusal))

    # ------------------------------------------------------------ the driver's interface

    @property
    def paused(self) -> bool:
        return bool(self._unread)

    @property
    def busy(self) -> bool:
        return self._inflight is not None

    def published(self, token: int, seqs: list[int]) -> None:
        self._done(token, seqs, None)

    def failed(self, token: int, reason: str) -> None:
        self._done(token, None, reason)

    def farewell(self, reason: str) -> bytes:
        return error_response(reason)

    def held(self) -> int:
        return self.parser.held

    def next_deadline(self) -> float | None:
        return None  # Marlin has no handshake nor keepalive; TCP keepalive finds dead peers

    def handle_timers(self, now: float) -> None:
        """Never due: :meth:`next_deadline` is always None."""

    def closed(self) -> None:
        for channel in self.channels:
            self.routes.unsubscribe(channel, self)
        self.channels.clear()
        self._unread.clear()

    def deliver(self, seq: int, frame: bytes, subject: str) -> None:
        if self.login is not None and not self.login.may_receive(subject):  # rights shrunk by a re-read users file
            return
        try:
            ready = self.echo.offer(seq, frame)
        except HeldTooMuch as exc:
            self.stats["slow consumers"] += 1
            reason = f"slow consumer: {exc}"
            self.outbox.close_now(reason, error_response(reason))
            return
        if ready is not None:
            self.outbox.push(ready)
            self.stats["delivered"] += 1

    # ------------------------------------------------------------ frames, in order

    def _run(self) -> None:
        unread, outbox = self._unread, self.outbox
        batch: list[bytes] = []
        ids: list[int] = []
        slot: Slot | None = None
        while unread and outbox.closing is None:
            frame = unread[0]
            if isinstance(frame, proto.Message):
                if self._inflight is not None and not batch:
                    break  # the batch before is confirmed first
                unread.popleft()
                result = self._prepare(frame)
                if isinstance(result, bytes):
                    if slot is None:
                        slot = outbox.hold()  # the batch's errors, if it fails; what follows waits behind it
                    batch.append(result)
                    ids.append(frame.id)
                else:
                    outbox.reply(error_response(result))
                continue
            if batch or self._inflight is not None:  # what was published before this frame is confirmed first
                break
            unread.popleft()
            if isinstance(frame, proto.FrameError):
                self.stats["malformed frames"] += 1
                outbox.reply(error_response(frame.reason))
                if frame.fatal:
                    unread.clear()
                    outbox.close(frame.reason)
                    break
            elif isinstance(frame, proto.Subscribe):
                outbox.reply(self._subscribe(frame.channel))
            elif isinstance(frame, proto.Unsubscribe):
                outbox.reply(self._unsubscribe(frame.channel))
            else:
                outbox.reply(error_response("RESPONSE is sent by the node, not by clients"))
        if batch:
            assert slot is not None  # held with the batch's first message
            token = next(self._tokens)
            self._inflight = (token, slot, ids)
            self.echo.publishing()
            self.requests.append(Publish(token, batch))

    def _done(self, token: int, seqs: list[int] | None, failure: str | None) -> None:
        if self._inflight is None or self._inflight[0] != token:
            return
        _, slot, ids = self._inflight
        self._inflight = None
        released = self.echo.published(seqs, self.deployment.position)
        for frame in released:
            self.outbox.push(frame)
        self.stats["delivered"] += len(released)
        if failure is None:
            self.outbox.fill(slot, b"")
        else:
            self.stats["publish failures"] += len(ids)
            self.outbox.fill(slot, b"".join(error_response(f"message {message_id} not confirmed by the backbone: {failure}")
                                            for message_id in ids))
        self._run()

    # ------------------------------------------------------------ frames

    def _subscribe(self, channel: bytes) -> bytes:
        if not channel:
            return error_response("cannot subscribe to the empty channel")
        if len(channel) > MAX_SUBJECT:
            return error_response(f"channel of {len(channel)} bytes is too long (at most {MAX_SUBJECT})")
        if is_internal(channel.decode("latin-1")):
            return error_response(f"permission denied: {_text(channel)} is internal to the deployment")
        if self.login is not None:
            subject = channel_to_subject_or_none(channel)
            if subject is None or not self.login.may_subscribe(subject):
                self.stats["subscriptions refused"] += 1
                return error_response(f"permission denied: user {self.login.name} may not subscribe to {_text(channel)}")
        if channel not in self.channels:
            if len(self.channels) >= MAX_SUBSCRIPTIONS:
                return error_response(f"at most {MAX_SUBSCRIPTIONS} channels per client; not subscribed to {_text(channel)}")
            self.channels[channel] = None
            self.routes.subscribe(channel, self)
        return proto.encode(proto.Response(True, channel))

    def _unsubscribe(self, channel: bytes) -> bytes:
        if channel not in self.channels:
            return error_response(f"not subscribed to {_text(channel)}")
        del self.channels[channel]
        self.routes.unsubscribe(channel, self)
        return proto.encode(proto.Response(True, channel))

    def _prepare(self, message: proto.Message) -> bytes | str:
        """The payload to publish, or why it cannot be."""
        try:
            subject, head = self.routes.heads.get(message.channel)
            payload = fitting(head + message.data)
        except (ChannelError, PayloadTooLarge) as exc:
            return f"message {message.id} not published: {exc}"
        if is_internal(subject):
            return f"message {message.id} not published: permission denied, {_text(message.channel)} is internal"
        if self.login is not None and not self.login.may_publish(subject):
            self.stats["publishes refused"] += 1
            return (f"message {message.id} not published: permission denied, user {self.login.name} "
                    f"may not publish to {_text(message.channel)}")
        return payload


def place(login: Login, certificate_name: str | None) -> str | None:
    """Log a client in as the user its verified certificate names; why it is refused, or None when placed.

    A certificate naming no user is refused, even where an anonymous user
    exists (as nats-server's ``verify_and_map``); without a certificate the
    client is the anonymous user, if the users file has one.
    """
    if certificate_name is not None:
        if login.certificate(certificate_name):
            return None
        return f"authentication failed: the client certificate names no user ({certificate_name})"
    if login.allowed_in:
        return None
    return "authentication required: present a client certificate that names a user"


def error_response(reason: str) -> bytes:
    return proto.encode(proto.Response(False, reason.encode("utf-8", "replace")))


def _text(channel: bytes) -> str:
    return channel.decode("utf-8", "replace")
