"""One Redis client's connection to the gateway: its commands mapped to backbone subjects, its replies.

Speaks enough of RESP2 and RESP3 for pub/sub: SUBSCRIBE, UNSUBSCRIBE,
PSUBSCRIBE (Redis glob patterns), PUNSUBSCRIBE, PUBLISH, PING, QUIT, HELLO,
CLIENT SETNAME/GETNAME/ID, SELECT 0, and GET answered by the cache node
(``fyrehose cache``).  Anything else gets a clear ``-ERR``.  Channels map to
backbone subjects as :mod:`fyrehose.gateways.channels` says.

With ``--users`` a client logs in (``AUTH``, ``HELLO ... AUTH``, or a TLS
client certificate) and is held to its user's rights as redis-server holds
a client to its ACL user: ``-NOAUTH`` before a login when clients without
credentials get nothing, ``-WRONGPASS`` for a credential that proves no user
(or one sent while its address is slowed), ``-NOPERM`` for a channel outside
the rights (:mod:`fyrehose.gateways.redis.rights`).  A credential not seen
before is checked off the loop (a :class:`~fyrehose.gateways.requests.Verify`
request); the commands after it wait unread until it is settled.

PUBLISH replies once the backbone confirmed the message; its integer is the
number of receivers in the whole deployment, counted as Redis counts them (a
client per matching channel and pattern subscription): this gateway's own,
exactly, plus those every other gateway and subscribing client announced
(:mod:`fyrehose.subjects.interest`; a subscription made elsewhere a moment ago may not
be counted yet).

Pure: :meth:`RedisConnection.receive` takes the client's bytes and leaves
replies in :attr:`RedisConnection.outbox` and what needs the backbone or the
cache in :attr:`RedisConnection.requests` (:mod:`fyrehose.gateways.requests`); the
driver feeds the results back.  Consecutive PUBLISHes are one request and are
not waited for: their replies are held in order while the client's next
PUBLISHes are read.  Any other command waits until every PUBLISH before it is
answered (a SUBSCRIBE after a PUBLISH must not receive that message, and its
confirmation must not follow pushes), so the commands after it stay unread
(:attr:`RedisConnection.paused`) until then.  A batch of PUBLISHes holds one
place in the outbox for all its replies, filled at once.
"""
from __future__ import annotations

import functools
import itertools
from collections import Counter, deque
from collections.abc import Callable

from fyrehose.gateways.access.login import Access, Login, Outcome
from fyrehose.gateways.access.users import User
from fyrehose.gateways.channels import (
    ChannelError,
    channel_to_subject,
    is_internal,
    pattern_is_internal,
    subject_to_channel,
)
from fyrehose.gateways.liveness import IdleTimeout
from fyrehose.gateways.outbox import Outbox, Slot
from fyrehose.gateways.payloads import PreparedHeads, fitting
from fyrehose.gateways.receiving import ParsingConnection
from fyrehose.gateways.redis import protocol as resp
from fyrehose.gateways.redis import rights
from fyrehose.gateways.requests import Deployment, Publish, Snapshot, Verify
from fyrehose.gateways.subscribers import ChannelSubscribers
from fyrehose.protocol.codec import PayloadTooLarge
from fyrehose.subjects.envelope import MAX_SUBJECT, Envelope, EnvelopeError, MsgType, Status, check_subject
from fyrehose.subjects.redis_glob import MAX_PATTERN, GlobIndex, literal_prefix
from fyrehose.subjects.session_table import SNAP_PREFIX

SERVER_VERSION = "7.0.0"  # the Redis release whose pub/sub replies this gateway follows
MAX_SUBSCRIPTIONS = 10000  # channels + patterns per client
MAX_PATTERNS = 256  # patterns per client (each is tried on channels its literal prefix does not rule out)
MAX_GATEWAY_PATTERNS = 4096  # distinct patterns of all clients together: bounds the matching work per message
MAX_CHANNEL = MAX_SUBJECT  # bytes of a channel name; no longer one can be carried on the backbone
TOO_MANY_CLIENTS = resp.error("ERR max number of clients reached")
NOPERM = resp.error("NOPERM this user has no permissions to access one of the channels used as arguments")
NOPERM_KEY = resp.error("NOPERM this user has no permissions to access one of the keys used as arguments")
NOAUTH = resp.error("NOAUTH Authentication required.")
WRONGPASS = resp.error("WRONGPASS invalid username-password pair or user is disabled.")
NO_PASSWORD = resp.error("ERR AUTH <password> called without any password configured for the default user. "
                         "Are you sure your configuration is correct?")
HELLO_NOAUTH = resp.error("NOAUTH HELLO must be called with the client already authenticated, otherwise the "
                          "HELLO AUTH <user> <pass> option can be used to authenticate the client and select the "
                          "RESP protocol version at the same time")
NO_AUTH_NEEDED = frozenset((b"auth", b"hello", b"quit"))  # what redis-server runs before a login (CMD_NO_AUTH)
MAX_COMMAND_BULK = 1 << 20  # larger arguments end the connection; up to this, a clear error
MAX_COMMAND = 2 << 20  # bytes of one whole command (its arguments and their overhead); more ends the connection
_PUBLISH = frozenset((b"PUBLISH", b"publish"))  # the spellings redis-benchmark and client libraries send
SUBSCRIBED_CONTEXT = {b"subscribe", b"unsubscribe", b"psubscribe", b"punsubscribe", b"ping", b"quit"}
MAX_WAITING = 4096  # PUBLISH replies held for the backbone before the client's input stops being read
_INTEGERS = tuple(resp.integer(count) for count in range(1024))  # receiver counts' replies, made once


class RedisRoutes(ChannelSubscribers["RedisConnection"]):
    """Which local clients want which channel: exact channels and glob patterns."""

    def __init__(self) -> None:
        super().__init__()
        self.patterns: GlobIndex[tuple[bytes, dict[RedisConnection, None]]] = GlobIndex()
        self.heads: PreparedHeads[bytes] = PreparedHeads(channel_to_subject)  # every client's PUBLISHes build on them

    def psubscribe(self, pattern: bytes, connection: RedisConnection) -> None:
        entry = self.patterns.get(pattern)
        if entry is None:
            entry = (pattern, {})
            self.patterns.add(pattern, entry)
        entry[1][connection] = None
        connection.deployment.interest.add_glob(pattern)

    def punsubscribe(self, pattern: bytes, connection: RedisConnection) -> None:
        entry = self.patterns.get(pattern)
        if entry is not None and connection in entry[1]:
            del entry[1][connection]
            if not entry[1]:
                self.patterns.discard(pattern)
            connection.deployment.interest.remove_glob(pattern)

    def receivers(self, channel: bytes) -> int:
        """How many deliveries a message on ``channel`` makes here (a client per matching subscription)."""
        count = len(self.channels.get(channel, ()))
        for _, connections in self.patterns.matching(channel):
            count += len(connections)
        return count

    def wants(self, subject: str) -> bool:
        """Whether a message on ``subject`` may reach a client here (the router opens no other)."""
        return subject in self.subjects or bool(self.patterns)

    def route(self, seq: int, message: Envelope) -> None:
        """Queue the message on every matching subscription; each distinct frame is built once.

        A client held to a user's rights (``--users``) gets it only if the user may read its subject.
        """
        subject = message.subject
        channel = subject_to_channel(subject)
        tail = b""
        connections = self.channels.get(channel)
        if connections:
            tail = resp.bulk(channel) + resp.bulk(message.data)
            frames = _Frames(3, MESSAGE_HEAD, tail)
            for connection in list(connections):
                if connection.checked and not connection.login.may_receive(subject):
                    continue
                connection.deliver(frames.get(connection.resp3))
        for pattern, connections in self.patterns.matching(channel):
            if connections:
                if not tail:
                    tail = resp.bulk(channel) + resp.bulk(message.data)
                frames = _Frames(4, PMESSAGE_HEAD + resp.bulk(pattern), tail)
                for connection in list(connections):
                    if connection.checked and not connection.login.may_receive(subject):
                        continue
                    connection.deliver(frames.get(connection.resp3))


class _Frames:
    """A pub/sub message's frame in RESP2 (an array) and RESP3 (a push), each built on first use."""

    __slots__ = ("count", "body", "built")

    def __init__(self, count: int, head: bytes, tail: bytes) -> None:
        self.count = count
        self.body = head + tail
        self.built: list[bytes] = [b"", b""]

    def get(self, resp3: bool) -> bytes:
        frame = self.built[resp3]
        if not frame:
            frame = self.built[resp3] = (b">%d\r\n" if resp3 else b"*%d\r\n") % self.count + self.body
        return frame


OK = resp.simple("OK")
MESSAGE_HEAD = resp.bulk(b"message")
PMESSAGE_HEAD = resp.bulk(b"pmessage")


class RedisConnection(ParsingConnection[resp.CommandParser, resp.Command | resp.RespError]):
    """One Redis client: its protocol version, name and subscriptions; its replies in :attr:`outbox`."""

    headroom = 0  # its farewell replaces what is queued: no room kept for it
    _ids = itertools.count(1)

    def __init__(self, routes: RedisRoutes, deployment: Deployment, stats: Counter, *,
                 request_timeout: float = 1.0, idle: IdleTimeout | None = None,
                 outbox: Outbox | None = None, now: float = 0.0, login: Login | None = None,
                 warn: Callable[[str], None] | None = None) -> None:
        """``login``: the client's identity (None: a gateway without ``--users``); ``warn``: logs a refusal."""
        self.outbox = outbox if outbox is not None else Outbox()
        self.requests: list[Publish | Snapshot | Verify] = []  # for the driver to carry out (and empty)
        self.login = login if login is not None else Login(Access(None), "")
        self.checked = self.login.access.required  # held to a user's rights (decided once: --users or not)
        self.warn = warn
        self.idle = idle or IdleTimeout()
        self.routes = routes
        self.deployment = deployment
        self.stats = stats
        self.request_timeout = request_timeout
        self.id = next(self._ids)
        self.parser = resp.CommandParser(max_bulk=MAX_COMMAND_BULK, max_command=MAX_COMMAND)
        self.resp3 = False
        self.name: bytes | None = None
        self.channels: dict[bytes, None] = {}
        self.patterns: dict[bytes, None] = {}
        self.last_input = now  # an idle client's silence counts from its connection (``now``) or its last input
        self._unread: deque[resp.Command | resp.RespError] = deque()  # parsed, waiting for earlier replies
        self._tokens = itertools.count(1)
        self._publishes: dict[int, tuple[Slot, list[int]]] = {}  # token -> its batch's slot, each PUBLISH's receivers
        self._publishing = 0  # PUBLISHes whose replies wait for the backbone
        self._gets: dict[int, Slot] = {}
        self._verifying: tuple[int, Slot, Callable[[], bytes | None]] | None = None  # a login being checked

    # ------------------------------------------------------------ the driver's interface

    def _before_parsing(self) -> None:
        if self.checked:  # before a login (and not while one is being checked): redis-server's tighter limits
            self.parser.guarded = self._verifying is None and not self.login.allowed_in

    @property
    def paused(self) -> bool:
        """Read nothing more for now: commands wait for earlier replies, or too many replies wait."""
        return (bool(self._unread) or self._verifying is not None or self._publishing >= MAX_WAITING
                or self.outbox.waiting >= MAX_WAITING)

    @property
    def busy(self) -> bool:
        """Results are still awaited (a client that closed its side still gets their replies)."""
        return bool(self._publishes or self._gets) or self._verifying is not None

    def published(self, token: int, seqs: list[int]) -> None:
        batch = self._publishes.pop(token, None)
        if batch is not None:
            slot, receivers = batch
            self._publishing -= len(receivers)
            known = len(_INTEGERS)
            self.outbox.fill(slot, b"".join([_INTEGERS[count] if count < known else resp.integer(count)
                                             for count in receivers]))
        self._run()

    def failed(self, token: int, reason: str) -> None:
        batch = self._publishes.pop(token, None)
        if batch is not None:
            slot, receivers = batch
            self._publishing -= len(receivers)
            self.stats["publish failures"] += len(receivers)
            # unconfirmed: every PUBLISH of the batch hears why
            self.outbox.fill(slot, resp.error(f"ERR publish not confirmed by the backbone: {reason}") * len(receivers))
        self._run()

    def answered(self, token: int, answer: Envelope | None) -> None:
        slot = self._gets.pop(token, None)
        if slot is not None:
            self.outbox.fill(slot, self._get_reply(answer))
        self._run()

    def verified(self, token: int, user: User | None) -> None:
        """The result of a :class:`Verify`: the login goes on (and the commands after it) or is refused."""
        pending = self._verifying
        if pending is None or pending[0] != token:
            return
        self._verifying = None
        _, slot, then = pending
        if self.login.conclude(user, self.last_input) is Outcome.ACCEPTED:
            reply = then()
        else:
            self._refused(None, "login refused")
            reply = WRONGPASS
        self.outbox.fill(slot, reply or b"")  # None: a further AUTH of the same HELLO holds a slot of its own
        self._run()

    def farewell(self, reason: str) -> bytes:
        return resp.error(f"ERR {reason}")

    def held(self) -> int:
        return self.parser.held

    def next_deadline(self) -> float | None:
        return self.idle.next_deadline(self.last_input, self._subscribed)

    def handle_timers(self, now: float) -> None:
        if self.idle.handle_timers(now, self.last_input, self._subscribed):
            self.stats["idle clients closed"] += 1
            self.outbox.close_now("idle timeout")  # silently, as redis-server does

    def closed(self) -> None:
        for channel in self.channels:
            self.routes.unsubscribe(channel, self)
        for pattern in self.patterns:
            self.routes.punsubscribe(pattern, self)
        self.channels.clear()
        self.patterns.clear()
        self._unread.clear()

    def deliver(self, frame: bytes) -> None:
        """Push one pub/sub message, framed for this client's protocol version."""
        self.outbox.push(frame)
        self.stats["delivered"] += 1

    # ------------------------------------------------------------ commands, in order

    @property
    def _subscribed(self) -> bool:
        return bool(self.channels or self.patterns)

    def _run(self) -> None:
        """Execute what was read, up to a command that must wait for the replies before it."""
        unread, outbox = self._unread, self.outbox
        receivers: list[int] = []
        payloads: list[bytes] = []
        while unread and outbox.closing is None and self._verifying is None:
            command = unread[0]
            if command.__class__ is resp.RespError:
                if outbox.waiting or payloads:
                    break
                unread.clear()
                self.stats["protocol errors"] += 1
                outbox.reply(resp.error(f"ERR {command.message}"))
                outbox.close(command.message)
                break
            name = b"publish" if command[0] in _PUBLISH else command[0].lower()  # type: ignore[index]
            if name != b"publish" and (outbox.waiting or payloads):
                break  # what was published before this command is answered first
            unread.popleft()
            result: bytes | tuple[bytes, int] | None
            if name == b"publish" and len(command) == 3 and (self.resp3 or not self._subscribed):  # type: ignore[arg-type]
                result = self._publish(command[1:])  # type: ignore[index]
            else:
                result = self._execute(name, command)  # type: ignore[arg-type]
            if result.__class__ is tuple:  # a PUBLISH: consecutive ones are one batch
                payloads.append(result[0])
                receivers.append(result[1])
                continue
            if payloads:  # a reply behind the batch: the batch takes its place first
                self._submit(payloads, receivers)
                payloads, receivers = [], []
            if result.__class__ is bytes:
                outbox.reply(result)
            if name == b"quit":
                unread.clear()
                outbox.close("QUIT")
        if payloads:
            self._submit(payloads, receivers)

    def _submit(self, payloads: list[bytes], receivers: list[int]) -> None:
        token = next(self._tokens)
        self._publishes[token] = (self.outbox.hold(), receivers)
        self._publishing += len(receivers)
        self.requests.append(Publish(token, payloads))

    def _execute(self, name: bytes, command: list[bytes]) -> bytes | tuple[bytes, int] | None:
        """The reply; a PUBLISH's payload and receiver count; None when the reply is held for the cache."""
        args = command[1:]
        handler = COMMANDS.get(name)
        if handler is None:
            shown = " ".join(f"'{_text(arg)[:64]}'" for arg in args[:4])
            return resp.error(f"ERR unknown command '{_text(name)[:64]}', with args beginning with: {shown}"
                              " (this gateway serves pub/sub only)")
        method, low, high = handler
        if not low <= len(args) <= high:
            return resp.error(f"ERR wrong number of arguments for '{_text(name)}' command")
        if name == b"acl":
            unknown = _acl_subcommand(args)
            if unknown is not None:
                return unknown
        # redis-server's order: the command and its arity, then the login, then the rights, then the context
        if self.checked and name not in NO_AUTH_NEEDED and not self.login.allowed_in:
            return self._noauth()
        if not self.resp3 and self._subscribed and name not in SUBSCRIBED_CONTEXT:
            if name == b"publish" and self.checked and not rights.may_publish(self.login, args[0]):
                return self._noperm("publishes refused", "PUBLISH")
            return resp.error(f"ERR Can't execute '{_text(name)}': only (P)SUBSCRIBE / (P)UNSUBSCRIBE / "
                              "PING / QUIT are allowed in this context")
        return method(self, args)

    # ------------------------------------------------------------ logins and rights

    def _noauth(self) -> bytes:
        self._refused("commands refused before a login", "command refused: not logged in (NOAUTH)")
        return NOAUTH

    def _noperm(self, counter: str, what: str, reply: bytes = NOPERM) -> bytes:
        self._refused(counter, f"{what} refused to user {self.login.name} (NOPERM)")
        return reply

    def _refused(self, counter: str | None, text: str) -> None:
        """Count a refusal (a failed login is counted by the login itself); log it at most once a second."""
        access, address = self.login.access, self.login.address
        may_log = access.refused(counter, address, self.last_input) if counter else access.log.allow(address, self.last_input)
        if may_log and self.warn is not None:
            self.warn(text)

    def _login(self, user: bytes | None, secret: bytes, then: Callable[[], bytes | None]) -> bytes | None:
        """Log in; ``then()`` gives the reply once accepted. None: the check runs off the loop (a slot is held)."""
        if not self.checked:  # redis-server without users: only ``default``, which takes any password
            if user is None:
                return NO_PASSWORD
            return then() if user == b"default" else WRONGPASS
        credential = rights.password(user, secret)
        outcome = self.login.attempt(credential, self.last_input)
        if outcome is Outcome.ACCEPTED:
            return then()
        if outcome is not None:  # throttled: refused without looking
            self._refused(None, "login refused: too many failures from this address")
            return WRONGPASS
        users = self.login.access.users
        assert users is not None
        token = next(self._tokens)
        self._verifying = (token, self.outbox.hold(), then)
        self.requests.append(Verify(token, users, credential))
        return None

    def _auth(self, args: list[bytes]) -> bytes | None:
        if len(args) > 2:
            return resp.error("ERR syntax error")
        user, secret = (None, args[0]) if len(args) == 1 else (args[0], args[1])
        return self._login(user, secret, lambda: OK)

    def _acl(self, args: list[bytes]) -> bytes:
        return resp.bulk(self.login.name.encode())

    def _ping(self, args: list[bytes]) -> bytes:
        if self._subscribed and not self.resp3:
            return resp.array([resp.bulk(b"pong"), resp.bulk(args[0] if args else b"")])
        return resp.bulk(args[0]) if args else resp.simple("PONG")

    def _quit(self, args: list[bytes]) -> bytes:
        return OK

    def _hello(self, args: list[bytes]) -> bytes | None:
        """As redis-server's: options in order (a name is set, a login made, before a later option fails)."""
        version = None
        if args:
            version = rights.long_long(args[0])
            if version is None:
                return resp.error("ERR Protocol version is not an integer or out of range")
            if version not in (2, 3):
                return resp.error("NOPROTO unsupported protocol version")
        return self._hello_options(version, args, 1)

    def _hello_options(self, version: int | None, args: list[bytes], index: int) -> bytes | None:
        while index < len(args):
            option, more = args[index].lower(), len(args) - 1 - index
            if option == b"auth" and more >= 2:
                return self._login(args[index + 1], args[index + 2],
                                   functools.partial(self._hello_options, version, args, index + 3))
            if option == b"setname" and more >= 1:
                if not _valid_name(args[index + 1]):
                    return resp.error("ERR Client names cannot contain spaces, newlines or special characters.")
                self.name = args[index + 1] or None
                index += 2
            else:
                return resp.error(f"ERR Syntax error in HELLO option '{_text(args[index])}'")
        if self.checked and not self.login.allowed_in:
            self._refused("commands refused before a login", "HELLO refused: not logged in (NOAUTH)")
            return HELLO_NOAUTH
        if version is not None:
            self.resp3 = version == 3
        resp3 = self.resp3
        fields = [
            (b"server", resp.bulk(b"fyrehose")),
            (b"version", resp.bulk(SERVER_VERSION.encode())),
            (b"proto", resp.integer(3 if resp3 else 2)),
            (b"id", resp.integer(self.id)),
            (b"mode", resp.bulk(b"standalone")),
            (b"role", resp.bulk(b"master")),
            (b"modules", resp.array([])),
        ]
        return resp.mapping([(resp.bulk(key), value) for key, value in fields], resp3)

    def _client(self, args: list[bytes]) -> bytes:
        sub = args[0].lower()
        if sub == b"setname" and len(args) == 2:
            if not _valid_name(args[1]):
                return resp.error("ERR Client names cannot contain spaces, newlines or special characters.")
            self.name = args[1] or None
            return resp.simple("OK")
        if sub == b"getname" and len(args) == 1:
            return resp.bulk(self.name) if self.name else resp.null(self.resp3)
        if sub == b"id" and len(args) == 1:
            return resp.integer(self.id)
        return resp.error(f"ERR unknown subcommand or wrong number of arguments for 'CLIENT {_text(args[0])}'"
                          " (this gateway supports SETNAME, GETNAME and ID)")

    def _select(self, args: list[bytes]) -> bytes:
        try:
            index = int(args[0])
        except ValueError:
            return resp.error("ERR value is not an integer or out of range")
        return resp.simple("OK") if index == 0 else resp.error("ERR DB index is out of range")

    def _subscribe(self, args: list[bytes]) -> bytes:
        if any(_internal_channel(channel) for channel in args):
            return NOPERM
        if self.checked and not all(rights.may_subscribe(self.login, channel) for channel in args):
            return self._noperm("subscriptions refused", "SUBSCRIBE")  # the whole command, as redis-server
        return self._add(args, self.channels, self.routes.subscribe, b"subscribe", MAX_CHANNEL)

    def _psubscribe(self, args: list[bytes]) -> bytes:
        if any(_internal_channel(literal_prefix(pattern)) for pattern in args):
            return NOPERM
        if self.checked and not all(rights.may_psubscribe(self.login, pattern) for pattern in args):
            return self._noperm("subscriptions refused", "PSUBSCRIBE")
        return self._add(args, self.patterns, self.routes.psubscribe, b"psubscribe", MAX_PATTERN)

    def _unsubscribe(self, args: list[bytes]) -> bytes:
        return self._remove(args, self.channels, self.routes.unsubscribe, b"unsubscribe")

    def _punsubscribe(self, args: list[bytes]) -> bytes:
        return self._remove(args, self.patterns, self.routes.punsubscribe, b"punsubscribe")

    def _add(self, names: list[bytes], held: dict[bytes, None], register, kind: bytes, longest: int) -> bytes:
        replies = []
        for name in names:
            if name not in held:
                if len(name) > longest:
                    replies.append(resp.error(f"ERR {kind.decode()} name of {len(name)} bytes is too long "
                                              f"(at most {longest})"))
                    continue
                if len(self.channels) + len(self.patterns) >= MAX_SUBSCRIPTIONS:
                    replies.append(resp.error(f"ERR at most {MAX_SUBSCRIPTIONS} subscriptions per client"))
                    continue
                if held is self.patterns and len(self.patterns) >= MAX_PATTERNS:
                    replies.append(resp.error(f"ERR at most {MAX_PATTERNS} pattern subscriptions per client"))
                    continue
                if held is self.patterns and self.routes.patterns.get(name) is None \
                        and len(self.routes.patterns) >= MAX_GATEWAY_PATTERNS:
                    replies.append(resp.error(f"ERR this gateway holds its most distinct patterns "
                                              f"({MAX_GATEWAY_PATTERNS}); subscribe to one already held"))
                    continue
                held[name] = None
                register(name, self)
            replies.append(self._confirmation(kind, name))
        return b"".join(replies)

    def _remove(self, names: list[bytes], held: dict[bytes, None], unregister, kind: bytes) -> bytes:
        if not names:
            names = list(held)
            if not names:
                return self._confirmation(kind, None)
        replies = []
        for name in names:
            if name in held:
                del held[name]
                unregister(name, self)
            replies.append(self._confirmation(kind, name))
        return b"".join(replies)

    def _confirmation(self, kind: bytes, name: bytes | None) -> bytes:
        count = len(self.channels) + len(self.patterns)
        item = resp.bulk(name) if name is not None else resp.null(self.resp3)
        return resp.push([resp.bulk(kind), item, resp.integer(count)], self.resp3)

    def _publish(self, args: list[bytes]) -> bytes | tuple[bytes, int]:
        """The payload to publish and its receiver count, or an error reply."""
        channel, data = args
        if self.checked and not self.login.allowed_in:  # the fast path of PUBLISH comes here without _execute
            return self._noauth()
        try:
            subject, head = self.routes.heads.get(channel)
            payload = fitting(head + data)
        except (ChannelError, PayloadTooLarge) as exc:
            return resp.error(f"ERR {exc}")
        if is_internal(subject):
            return NOPERM
        if self.checked and not self.login.may_publish(subject):
            return self._noperm("publishes refused", "PUBLISH")
        return payload, self.routes.receivers(channel) + self.deployment.subscribers_elsewhere(subject)

    def _get(self, args: list[bytes]) -> bytes | None:
        """Ask the cache (the reply is held until it answers), or an error reply."""
        try:
            subject = channel_to_subject(args[0])
            check_subject(SNAP_PREFIX + subject)
        except (ChannelError, EnvelopeError) as exc:
            return resp.error(f"ERR {exc}")
        if self.checked and not self.login.may_subscribe(subject):  # a last value is read as a message is
            return self._noperm("subscriptions refused", "GET", NOPERM_KEY)
        token = next(self._tokens)
        self._gets[token] = self.outbox.hold()
        self.requests.append(Snapshot(token, subject, self.request_timeout))
        return None

    def _get_reply(self, answer: Envelope | None) -> bytes:
        if answer is None:
            return resp.error(f"ERR no cache answered within {self.request_timeout:g} s "
                              "(GET is served by `fyrehose cache`)")
        if answer.status == Status.NOT_FOUND:
            return resp.null(self.resp3)
        if answer.type != MsgType.INITIAL or answer.status == Status.TEMP_UNAVAIL:
            return resp.error(f"ERR the cache answered {answer.type.name}/{answer.status.name}")
        return resp.bulk(answer.data)  # a stale value is still the last value


# command -> (method, fewest arguments, most arguments)
COMMANDS = {
    b"ping": (RedisConnection._ping, 0, 1),
    b"quit": (RedisConnection._quit, 0, 0),
    b"hello": (RedisConnection._hello, 0, 1 << 30),
    b"client": (RedisConnection._client, 1, 2),
    b"select": (RedisConnection._select, 1, 1),
    b"subscribe": (RedisConnection._subscribe, 1, 1 << 30),
    b"psubscribe": (RedisConnection._psubscribe, 1, 1 << 30),
    b"unsubscribe": (RedisConnection._unsubscribe, 0, 1 << 30),
    b"punsubscribe": (RedisConnection._punsubscribe, 0, 1 << 30),
    b"publish": (RedisConnection._publish, 2, 2),
    b"get": (RedisConnection._get, 1, 1),
    b"auth": (RedisConnection._auth, 1, 1 << 30),
    b"acl": (RedisConnection._acl, 1, 1 << 30),
}


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _internal_channel(channel: bytes) -> bool:
    """Whether ``channel`` (or a pattern's literal prefix) lies in a subject tree the deployment keeps for itself."""
    return pattern_is_internal(channel.decode("latin-1"))


def _acl_subcommand(args: list[bytes]) -> bytes | None:
    """The error for an ACL subcommand this gateway does not serve (before the login check, as redis-server)."""
    if args[0].lower() != b"whoami":
        return resp.error(f"ERR unknown subcommand '{_text(args[0])[:128]}'. This gateway serves ACL WHOAMI only.")
    if len(args) != 1:
        return resp.error("ERR wrong number of arguments for 'acl|whoami' command")
    return None


def _valid_name(name: bytes) -> bool:
    return all(0x21 <= byte <= 0x7E for byte in name)
