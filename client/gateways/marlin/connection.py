"""One Marlin PubSub client's connection to the gateway: channels on the backbone.

Each client SUBSCRIBEs and UNSUBSCRIBEs channels (answered with a RESPONSE:
OK with the channel as message, or ERROR with the reason) and publishes
MESSAGEs, which reach every *other* client subscribed to the channel, here
or behind any gateway, as MESSAGEs whose id is the backbone sequence number
(so ids increase in delivery order).  A publish gets no answer unless it
fails, which earns a RESPONSE ERROR naming the message id.  Channels map to
backbone subjects as :mod:`fyrehose.gateways.channels` says; the TCP framing
is in :mod:`fyrehose.gateways.marlin.protocol` and docs/gateways.md.
"""
from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from fyrehose.gateways.channels import (
    ChannelError,
    channel_to_subject,
    channel_to_subject_or_none,
    is_internal,
    subject_to_channel,
)
from fyrehose.gateways.echo import EchoFilter, HeldTooMuch
from fyrehose.gateways.marlin import protocol as proto
from fyrehose.gateways.sizes import checked
from fyrehose.protocol.codec import PayloadTooLarge
from fyrehose.subjects.envelope import MAX_SUBJECT, Envelope

if TYPE_CHECKING:
    from fyrehose.gateways.router import GatewayRouter
    from fyrehose.gateways.tcp import TcpClient

MAX_SUBSCRIPTIONS = 10000  # channels per client
MAX_FRAME = 1 << 20


class MarlinRoutes:
    """Which local clients subscribed to which channel."""

    def __init__(self) -> None:
        self.channels: dict[bytes, dict[MarlinConnection, None]] = {}
        self.subjects: set[str] = set()  # the subjects of the channels in ``channels``, for ``wants``

    def subscribe(self, channel: bytes, connection: MarlinConnection) -> None:
        subject = channel_to_subject_or_none(channel)
        if channel not in self.channels and subject is not None:
            self.subjects.add(subject)
        self.channels.setdefault(channel, {})[connection] = None
        if subject is not None:  # announced, so other gateways count this subscriber
            connection.router.interest.add(subject)

    def unsubscribe(self, channel: bytes, connection: MarlinConnection) -> None:
        connections = self.channels.get(channel)
        if connections is not None and connection in connections:
            del connections[connection]
            subject = channel_to_subject_or_none(channel)
            if not connections:
                del self.channels[channel]
                self.subjects.discard(subject)
            if subject is not None:
                connection.router.interest.remove(subject)

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
            connection.deliver(seq, frame)


class MarlinConnection:
    """One Marlin client: its channels and the publishes it is waiting on."""

    def __init__(self, client: TcpClient, routes: MarlinRoutes, router: GatewayRouter, stats: Counter) -> None:
        self.client = client
        self.routes = routes
        self.router = router
        self.stats = stats
        self.parser = proto.FrameParser(MAX_FRAME)
        self.channels: dict[bytes, None] = {}
        self.echo = EchoFilter(client.max_pending)

    # ------------------------------------------------------------ the driver's interface

    def receive(self, data: bytes) -> None:
        replies: list[bytes] = []
        batch: list[tuple[int, Envelope]] = []  # (message id, message)
        for frame in self.parser.feed(data):
            if isinstance(frame, proto.Message):
                result = self._prepare(frame)
                if isinstance(result, Envelope):
                    batch.append((frame.id, result))
                else:
                    replies.append(error_response(result))
                continue
            if batch:  # what was published before this frame is confirmed first
                replies.extend(self._publish(batch))
                batch = []
            if isinstance(frame, proto.FrameError):
                self.stats["malformed frames"] += 1
                replies.append(error_response(frame.reason))
                if frame.fatal:
                    self.client.send(b"".join(replies))
                    self.client.close(frame.reason)
                    return
            elif isinstance(frame, proto.Subscribe):
                replies.append(self._subscribe(frame.channel))
            elif isinstance(frame, proto.Unsubscribe):
                replies.append(self._unsubscribe(frame.channel))
            else:
                replies.append(error_response("RESPONSE is sent by the node, not by clients"))
        if batch:
            replies.extend(self._publish(batch))
        if replies:
            self.client.send(b"".join(replies))

    def farewell(self, reason: str) -> bytes:
        return error_response(reason)

    def held(self) -> int:
        return self.parser.held

    def wake_at(self) -> float | None:
        return None  # Marlin has no handshake nor keepalive; TCP keepalive finds dead peers

    def wake(self, now: float) -> None:
        pass

    def closed(self) -> None:
        for channel in self.channels:
            self.routes.unsubscribe(channel, self)
        self.channels.clear()

    def deliver(self, seq: int, frame: bytes) -> None:
        try:
            ready = self.echo.offer(seq, frame)
        except HeldTooMuch as exc:
            self.client.slow_consumer(str(exc))
            return
        if ready is not None:
            self.client.send(ready)
            self.stats["delivered"] += 1

    # ------------------------------------------------------------ frames

    def _subscribe(self, channel: bytes) -> bytes:
        if not channel:
            return error_response("cannot subscribe to the empty channel")
        if len(channel) > MAX_SUBJECT:
            return error_response(f"channel of {len(channel)} bytes is too long (at most {MAX_SUBJECT})")
        if is_internal(channel.decode("latin-1")):
            return error_response(f"permission denied: {_text(channel)} is internal to the deployment")
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

    def _prepare(self, message: proto.Message) -> Envelope | str:
        """The message to publish, or why it cannot be."""
        try:
            message_envelope = checked(Envelope(channel_to_subject(message.channel), message.data))
        except (ChannelError, PayloadTooLarge) as exc:
            return f"message {message.id} not published: {exc}"
        if is_internal(message_envelope.subject):
            return f"message {message.id} not published: permission denied, {_text(message.channel)} is internal"
        return message_envelope

    def _publish(self, batch: list[tuple[int, Envelope]]) -> list[bytes]:
        """Publish; RESPONSE ERRORs for what the backbone did not confirm."""
        self.echo.publishing()
        seqs = None
        try:
            seqs = self.router.publish([message for _, message in batch])
            failures = []
        except Exception as exc:
            self.stats["publish failures"] += len(batch)
            failures = [error_response(f"message {message_id} not confirmed by the backbone: {exc}")
                        for message_id, _ in batch]
        finally:
            released = self.echo.published(seqs, self.router.position)
        for frame in released:
            self.client.send(frame)
        self.stats["delivered"] += len(released)
        return failures


def error_response(reason: str) -> bytes:
    return proto.encode(proto.Response(False, reason.encode("utf-8", "replace")))


def _text(channel: bytes) -> str:
    return channel.decode("utf-8", "replace")
