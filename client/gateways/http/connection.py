"""One HTTP/1.1 connection: h11's state machine, the routes, and the switch to WebSocket or SSE; pure.

Requests are answered in order on a kept-alive connection.  The request line
and headers together are bounded (``431``), bodies by ``--max-message``
(``413``, before reading them); malformed HTTP gets h11's status (``400``) and
a close; a request that does not arrive whole within the idle timeout gets
``408`` (or, when nothing was sent, a quiet close).  ``GET /resp`` with a
WebSocket upgrade from an allowed origin turns the connection into a
:class:`~fyrehose.gateways.http.websocket.WebSocketEndpoint` carrying a Redis
connection; ``GET /v1/stream/<pattern>`` into an SSE response that lasts
until the client leaves.

Pure, like the Redis, NATS and Marlin connections: bytes and time in,
:attr:`HttpConnection.outbox` and :attr:`HttpConnection.requests` out.  A
``POST /v1/publish`` is a :class:`~fyrehose.gateways.requests.Publish`, a
``GET /v1/last`` a :class:`~fyrehose.gateways.requests.Snapshot`; the response
is held until the driver feeds the result back, and the next request (h11
keeps pipelined ones) is not looked at before.  An SSE response asks its
driver for a :class:`Stream`, whose events the driver frames with
:meth:`HttpConnection.sse_data`.

With ``--users`` (:class:`~fyrehose.gateways.access.login.Access` required),
every route but ``/healthz`` and the live view's files asks who the client
is, request by request (:mod:`fyrehose.gateways.http.authorization`): a
credential this process verified before is accepted at once, any other is
handed to the driver as a :class:`~fyrehose.gateways.requests.Verify` and the
request waits for it, as it waits for a publish.  ``401`` with the challenge
answers a missing or wrong credential, ``429`` an address that failed too
often lately, ``403`` a logged-in user outside its rights; nothing of a
refused request reaches the backbone.
"""
from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import unquote_to_bytes, urlsplit

import h11
from wsproto.connection import Connection as WsConnection
from wsproto.connection import ConnectionType
from wsproto.utilities import generate_accept_token

from fyrehose.gateways.access.login import Login, Outcome
from fyrehose.gateways.access.users import User
from fyrehose.gateways.http import sse
from fyrehose.gateways.http.authorization import CHALLENGE, MalformedCredentials, request_credential
from fyrehose.gateways.http.settings import HttpSettings
from fyrehose.gateways.http.websocket import CLOSE_HEADROOM, RespOverWebSocket, StreamMark, WebSocketEndpoint
from fyrehose.gateways.http.whole_request import WholeRequest, WholeRequestReader
from fyrehose.gateways.outbox import Outbox, Slot
from fyrehose.gateways.payloads import encoded
from fyrehose.gateways.redis.connection import RedisConnection, RedisRoutes
from fyrehose.gateways.requests import Deployment, Publish, Snapshot, Verify
from fyrehose.protocol.codec import PayloadTooLarge
from fyrehose.subjects.envelope import Envelope, EnvelopeError, MsgType, Status, check_subject
from fyrehose.subjects.patterns import check_pattern
from fyrehose.subjects.session_table import SNAP_PREFIX
from fyrehose.subjects.snapshots import record_sequence

STATIC_FILES = {  # path -> (file in the package's static folder, content type)
    "/": ("index.html", "text/html; charset=utf-8"),
    "/live.js": ("live.js", "text/javascript; charset=utf-8"),
    "/live.css": ("live.css", "text/css; charset=utf-8"),
}
SERVER = ("server", "fyrehose")
REASONS = {100: "Continue", 101: "Switching Protocols", 200: "OK", 304: "Not Modified", 400: "Bad Request",
           401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout",
           413: "Request Entity Too Large", 426: "Upgrade Required", 429: "Too Many Requests",
           431: "Request Header Fields Too Large",
           500: "Internal Server Error", 502: "Bad Gateway", 501: "Not Implemented", 503: "Service Unavailable", 504: "Gateway Timeout"}


@dataclass(slots=True)
class Stream:
    """Start the SSE events of ``pattern`` on this connection (after ``last_event_id``: a backfill first)."""

    pattern: str
    last_event_id: int | None
    login: Login | None = None  # with --users: each event is asked whether the user may receive it


@dataclass(slots=True)
class Note:
    """A line for the gateway's log (a refused client; at most one a second per address)."""

    line: str


class Site(Protocol):
    """What every connection of one HTTP gateway shares (:class:`fyrehose.gateways.drivers.http.gateway.HttpGateway`)."""

    settings: HttpSettings
    stats: Counter
    mark: StreamMark

    @property
    def redis_routes(self) -> RedisRoutes:
        """The RESP connections' channels and patterns."""

    def receivers(self, subject: str) -> int:
        """Deliveries a message on ``subject`` makes in the deployment."""

    def static(self, name: str) -> bytes:
        """A file of the live view."""

    def healthy(self) -> bool:
        """Whether the backbone answers."""

    def metrics_text(self) -> bytes:
        """The gateway's counters, Prometheus text."""


class BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


PUBLISHED = b'{"seq": %d, "receivers": %d}\n'  # a publish's JSON answer, as json.dumps writes it
GUARDED = ("/resp", "/metrics", "/v1/")  # with --users, these paths (and those under /v1/) ask who the client is
QUERY_CREDENTIAL = ("/resp", "/v1/stream/")  # where a browser cannot send a header: ?access_token= too


class HttpConnection:
    """One HTTP client's connection; after an upgrade, its WebSocket carrying a Redis connection."""

    def __init__(self, site: Site, deployment: Deployment, now: float, login: Login | None = None, *,
                 llhttp: bool = True) -> None:
        self.site = site
        self.login = login  # the client's identity, which /resp's Redis commands (AUTH, rights) go on with
        self.deployment = deployment
        self.settings = site.settings
        self.stats = site.stats
        self.outbox = Outbox()
        self.requests: list[Publish | Snapshot | Stream | Verify | Note] = []
        self.http = h11.Connection(h11.SERVER, max_incomplete_event_size=self.settings.max_head)
        # A plain POST /v1/publish that arrives whole is read by llhttp, answered without h11 (h11 reads the rest).
        self.whole = WholeRequestReader(self.settings.max_head, self.settings.max_message) if llhttp else None
        self.websocket: WebSocketEndpoint | None = None
        self.resp: RedisConnection | None = None
        self.streaming = False
        self.headroom = 0  # output kept free for the farewell (a WebSocket's 1008 close frame)
        self._request: h11.Request | None = None
        self._body: list[bytes] = []
        self._body_size = 0
        self._clock = now  # the latest time heard of
        self._idle_since: float | None = now  # when the wait for the next whole request began
        self._lapsed_deadline = 0.0  # the idle deadline of the wait that ended with the request served now
        self._tokens = 0
        # the request whose result is awaited (None in place of h11's request: one read whole by llhttp)
        self._waiting: tuple[int, Slot, str, h11.Request | None] | None = None
        self.access = login.access if login is not None else None
        self.address = login.address if login is not None else ""  # logins are throttled per address
        self._guarded = self.access is not None and self.access.required  # once: nothing per request without --users
        self._verifying: tuple[int, Login, str] | None = None  # a credential checked off the loop, for this path

    # ------------------------------------------------------------ the driver's interface

    def receive(self, data: bytes, now: float) -> None:
        self._clock = now
        if self.outbox.closing is not None:
            return
        if self.websocket is not None:
            self.websocket.receive(data)
            return
        if self.streaming:
            return  # an SSE client has nothing more to say; what it sends is not buffered
        whole = self.whole
        if (whole is not None and self._waiting is None and self._verifying is None and not self._guarded
                and self.http.their_state is h11.IDLE and not self.http.trailing_data[0]):
            request = whole.read(data)
            if request is not None and self._publish_whole(request):
                return
        self.http.receive_data(data)
        self._handle_events()

    @property
    def paused(self) -> bool:
        """Read nothing more for now: a response waits for the backbone or the cache."""
        if self.resp is not None:
            return self.resp.paused
        return self._waiting is not None or self._verifying is not None

    @property
    def busy(self) -> bool:
        if self.resp is not None:
            return self.resp.busy
        return self._waiting is not None or self._verifying is not None

    def published(self, token: int, seqs: list[int]) -> None:
        if self.resp is not None:
            self.resp.published(token, seqs)
            return
        waiting = self._take_waiting(token)
        if waiting is not None:
            _, slot, subject, request = waiting
            body = PUBLISHED % (seqs[0], self.site.receivers(subject))
            if request is None:
                self._answer_whole(slot, 200, body, "application/json")
            else:
                self._answer(slot, 200, body, content_type="application/json")

    def failed(self, token: int, reason: str) -> None:
        if self.resp is not None:
            self.resp.failed(token, reason)
            return
        waiting = self._take_waiting(token)
        if waiting is not None:
            self.stats["publish failures"] += 1
            body = f"publish not confirmed by the backbone: {reason}\n".encode()
            if waiting[3] is None:
                self._answer_whole(waiting[1], 503, body, "text/plain; charset=utf-8")
            else:
                self._answer(waiting[1], 503, body)

    def answered(self, token: int, answer: Envelope | None) -> None:
        if self.resp is not None:
            self.resp.answered(token, answer)
            return
        waiting = self._take_waiting(token)
        if waiting is not None:
            _, slot, subject, request = waiting
            assert request is not None  # llhttp reads publishes only
            self._last(slot, subject, request, answer)

    def verified(self, token: int, user: User | None) -> None:
        if self.resp is not None:
            self.resp.verified(token, user)  # a RESP AUTH over /resp: the Redis side's
            return
        verifying = self._verifying  # the request's credential was checked: serve it, or answer 401
        if verifying is None or verifying[0] != token or self.outbox.closing is not None:
            return
        self._verifying = None
        _, login, path = verifying
        self._logged_in(login, login.conclude(user, self._clock), path)
        if self._waiting is None:
            self._next_cycle()
        self._handle_events()

    def farewell(self, reason: str) -> bytes:
        if self.websocket is not None:
            return self.websocket.farewell(reason)
        if self.streaming:  # the end of the chunked body, after a comment saying why
            try:
                return self.http.send(h11.Data(data=sse.comment(reason))) + self.http.send(h11.EndOfMessage())
            except h11.LocalProtocolError:
                return b""
        return b""

    def held(self) -> int:
        """Input kept for what is not complete yet (a body, a WebSocket message, a RESP command): --max-input."""
        if self.websocket is not None:
            return self.websocket.held() + (self.resp.held() if self.resp is not None else 0)
        return self._body_size + len(self.http.trailing_data[0])

    def next_deadline(self) -> float | None:
        """The idle deadline: a request must arrive whole within the idle timeout.

        While a request is served there is none, but the last one is given until it passes: the driver's
        timer, armed at it, then stays as it is instead of being stopped for each request and made again
        for the next (it fires at most once per idle timeout and finds nothing to do)."""
        if self.websocket is not None or self.streaming:
            return None
        if self._idle_since is None:
            return self._lapsed_deadline if self._lapsed_deadline > self._clock else None
        return self._idle_since + self.settings.idle_timeout

    def handle_timers(self, now: float) -> None:
        self._clock = now
        at = self.next_deadline()
        if at is None or now < at or self.outbox.closing is not None:
            return
        self.stats["http idle timeouts"] += 1
        if self.http.their_state is h11.IDLE and not self.http.trailing_data[0]:
            self.outbox.close_now(f"idle for {self.settings.idle_timeout:g} s")  # nothing was asked
        else:
            self._fail(408, f"no complete request within {self.settings.idle_timeout:g} s")

    def closed(self) -> None:
        if self.resp is not None:
            self.resp.closed()

    def sse_data(self, data: bytes) -> bytes:
        """``data`` as part of the SSE response's chunked body."""
        return self.http.send(h11.Data(data=data))

    # ------------------------------------------------------------ HTTP

    def _handle_events(self) -> None:
        settings = self.settings
        while (self.outbox.closing is None and self._waiting is None and self._verifying is None
               and self.websocket is None and not self.streaming):
            try:
                event = self.http.next_event()
            except h11.RemoteProtocolError as exc:
                self.stats["http protocol errors"] += 1
                self._fail(exc.error_status_hint, str(exc))
                return
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.Request):
                self._request, self._body, self._body_size = event, [], 0
                if _head_size(event) > settings.max_head:  # h11 bounds only what is still incomplete
                    self._fail(431, f"request line and headers over {settings.max_head} bytes")
                    return
                length = _header(event, b"content-length")
                if length is not None and length.isdigit() and int(length) > settings.max_message:
                    self._fail(413, f"body over {settings.max_message} bytes")
                    return
                if self.http.they_are_waiting_for_100_continue:  # curl's Expect: the body is welcome
                    self.outbox.reply(self.http.send(h11.InformationalResponse(status_code=100, headers=[],
                                                                               reason=b"Continue")))
            elif isinstance(event, h11.Data):
                self._body_size += len(event.data)
                if self._body_size > settings.max_message:
                    self._fail(413, f"body over {settings.max_message} bytes")
                    return
                self._body.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                self._serving()
                self._dispatch()
                if self._waiting is None and self._verifying is None:
                    self._next_cycle()
            elif isinstance(event, h11.ConnectionClosed):
                self.outbox.close("client closed")
                return

    def _next_cycle(self) -> None:
        """The response is out: on to the next request, unless this connection ends or changed protocol."""
        if self.websocket is not None or self.streaming or self.outbox.closing is not None:
            return
        if self.http.our_state is h11.MUST_CLOSE or self.http.their_state is h11.MUST_CLOSE:
            self.outbox.close("request done")
            return
        self.http.start_next_cycle()
        self._idle_since = self._clock

    def _serving(self) -> None:
        """A whole request arrived: no idle deadline until its response is out."""
        if self._idle_since is not None:
            self._lapsed_deadline = self._idle_since + self.settings.idle_timeout
            self._idle_since = None

    def _take_waiting(self, token: int) -> tuple[int, Slot, str, h11.Request | None] | None:
        waiting = self._waiting
        if waiting is None or waiting[0] != token:
            return None
        self._waiting = None
        return waiting

    def _answer(self, slot: Slot, status: int, body: bytes, **options) -> None:
        """Fill the held response, then go on with the requests that waited behind it."""
        try:
            response = self._response(status, body, **options)
        except h11.LocalProtocolError:  # the connection broke meanwhile: nothing can follow
            response = b""
        self.outbox.fill(slot, response)
        self._next_cycle()
        self._handle_events()

    def _publish_whole(self, request: WholeRequest) -> bool:
        """Hand on a plain POST /v1/publish read by llhttp; False for anything h11 must answer (its errors too)."""
        target = request.target
        if request.method != b"POST" or not target.startswith(b"/v1/publish/"):
            return False
        try:
            path = target.decode("ascii")
            if "?" in path or "#" in path:  # else the target is the path (it starts with /v1/: no authority)
                path = urlsplit(path).path
            subject = _subject(path, "/v1/publish/")
            payload = encoded(Envelope(subject, request.body))
        except (BadRequest, PayloadTooLarge, EnvelopeError):
            return False
        self._request = None  # h11's last request is answered: an error response h11 writes next has a body
        self._serving()
        self._tokens += 1
        self._waiting = (self._tokens, self.outbox.hold(), subject, None)
        self.requests.append(Publish(self._tokens, [payload]))
        return True

    def _answer_whole(self, slot: Slot, status: int, body: bytes, content_type: str) -> None:
        """Fill the response to a request h11 never saw (the bytes h11 would write), then on to what h11 holds."""
        self.outbox.fill(slot, _whole_head(status, content_type) % (len(body), body))
        self.stats[f"http {status}"] += 1
        self._idle_since = self._clock
        if self.http.their_state is not h11.IDLE or self.http.trailing_data[0]:  # else h11 would say NEED_DATA
            self._handle_events()

    def _fail(self, status: int, message: str) -> None:
        """Answer a request that cannot be served (or followed) with ``status``, then hang up."""
        if self.http.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            try:
                self.outbox.reply(self._response(status, (message + "\n").encode(), close=True))
            except h11.LocalProtocolError:
                pass
        self.outbox.close(f"HTTP {status}: {message}")

    def _respond(self, status: int, body: bytes = b"", **options) -> None:
        self.outbox.reply(self._response(status, body, **options))

    def _response(self, status: int, body: bytes = b"", *, content_type: str = "text/plain; charset=utf-8",
                  headers: list[tuple[str, str]] | None = None, close: bool = False) -> bytes:
        fields = [SERVER, ("content-type", content_type), ("content-length", str(len(body))), *(headers or [])]
        if close:
            fields.append(("connection", "close"))
        out = self.http.send(h11.Response(status_code=status, headers=fields, reason=_reason(status)))
        if body and (self._request is None or self._request.method != b"HEAD"):
            out += self.http.send(h11.Data(data=body))
        out += self.http.send(h11.EndOfMessage())
        self.stats[f"http {status}"] += 1
        return out

    def _dispatch(self) -> None:
        request = self._request
        assert request is not None
        target = urlsplit(request.target.decode("ascii", "replace"))
        path = target.path
        if self._guarded and path.startswith(GUARDED):
            self._log_in(request, path, target.query)
        else:
            self._route(path, None)

    def _route(self, path: str, login: Login | None) -> None:
        """Serve the request; ``login`` (None without --users) is who asks, checked against what it asks for."""
        request = self._request
        assert request is not None
        method = request.method
        try:
            if path == "/resp":
                self._upgrade(request, login)
            elif path.startswith("/v1/publish/"):
                _allow(method, b"POST")
                self._publish(_subject(path, "/v1/publish/"), request, login)
            elif path.startswith("/v1/last/"):
                _allow(method, b"GET", b"HEAD")
                self._ask_last(_subject(path, "/v1/last/"), request, login)
            elif path.startswith("/v1/stream/"):
                _allow(method, b"GET")
                self._stream(path, request, login)
            elif path == "/metrics":
                _allow(method, b"GET", b"HEAD")
                if login is not None and not login.logged_in:
                    raise self._refusal(login, "/metrics is for logged-in users", "")
                self._respond(200, self.site.metrics_text(), content_type="text/plain; version=0.0.4; charset=utf-8")
            elif path == "/healthz":
                _allow(method, b"GET", b"HEAD")
                healthy = self.site.healthy()
                self._respond(200 if healthy else 503, b"ok\n" if healthy else b"backbone not answering\n")
            elif path in STATIC_FILES:
                _allow(method, b"GET", b"HEAD")
                name, content_type = STATIC_FILES[path]
                self._respond(200, self.site.static(name), content_type=content_type,
                              headers=[("cache-control", "no-cache")])
            else:
                raise BadRequest(404, f"no route for {path}")
        except BadRequest as exc:
            headers = [("allow", "POST")] if exc.status == 405 and path.startswith("/v1/publish/") else []
            if exc.status == 401:
                headers = [("www-authenticate", CHALLENGE)]
            self._respond(exc.status, (str(exc) + "\n").encode(), headers=headers)

    # ------------------------------------------------------------ who asks (with --users)

    def _log_in(self, request: h11.Request, path: str, query: str) -> None:
        """Serve the request as the user its credential proves (or as the anonymous user, without one)."""
        login = Login(self.access, self.address)  # type: ignore[arg-type]  # _guarded: there is an access
        authorizations = [bytes(value) for name, value in request.headers if name == b"authorization"]
        try:
            credential = request_credential(authorizations, query, query_allowed=path.startswith(QUERY_CREDENTIAL))
        except MalformedCredentials as exc:
            self._unauthorized(f"unusable credentials: {exc}")
            return
        if credential is None:
            self._route(path, login)
            return
        outcome = login.attempt(credential, self._clock)
        if outcome is None:  # the slow check, off the loop; this request waits for it, the next ones behind it
            users = login.access.users
            assert users is not None  # _guarded
            self._tokens += 1
            self._verifying = (self._tokens, login, path)
            self.requests.append(Verify(self._tokens, users, credential))
            return
        self._logged_in(login, outcome, path)

    def _logged_in(self, login: Login, outcome: Outcome, path: str) -> None:
        if outcome is Outcome.ACCEPTED:
            self._route(path, login)
        elif outcome is Outcome.THROTTLED:
            wait = max(1, math.ceil(login.access.throttle.blocked(self.address, self._clock)))
            self._note("", f"{self.address}: login refused, too many failures lately")
            self._respond(429, f"too many failed logins from {self.address}: retry in {wait} s\n".encode(),
                          headers=[("retry-after", str(wait))])
        else:
            self._note("", f"{self.address}: login refused: wrong credentials")
            self._unauthorized("wrong credentials")

    def _unauthorized(self, message: str) -> None:
        self._respond(401, (message + "\n").encode(), headers=[("www-authenticate", CHALLENGE)])

    def _refusal(self, login: Login, message: str, counter: str) -> BadRequest:
        """401 for a client that sent no credentials (logging in may help), 403 for a logged-in user."""
        if not login.logged_in:
            return BadRequest(401, f"log in: {message}")
        self._note(counter, f"{self.address}: user {login.name} refused: {message}")
        return BadRequest(403, message)

    def _note(self, counter: str, line: str) -> None:
        """Count a refusal under ``counter`` (unless the login counted it); log it, once a second per address."""
        access = self.access
        assert access is not None
        if counter:
            access.stats[counter] += 1
        if access.log.allow(self.address, self._clock):
            self.requests.append(Note(line))

    def _hold(self, request: Publish | Snapshot, subject: str, http_request: h11.Request) -> None:
        self._waiting = (request.token, self.outbox.hold(), subject, http_request)
        self.requests.append(request)

    # ------------------------------------------------------------ routes

    def _publish(self, subject: str, request: h11.Request, login: Login | None) -> None:
        if login is not None and not login.may_publish(subject):
            raise self._refusal(login, f"no permission to publish to {subject}", "publishes refused")
        data = b"".join(self._body)
        try:
            payload = encoded(Envelope(subject, data))
        except PayloadTooLarge as exc:
            raise BadRequest(413, f"payload too large for one backbone message: {exc}") from None
        except EnvelopeError as exc:
            raise BadRequest(400, str(exc)) from None
        self._tokens += 1
        self._hold(Publish(self._tokens, [payload]), subject, request)

    def _ask_last(self, subject: str, request: h11.Request, login: Login | None) -> None:
        try:
            check_subject(SNAP_PREFIX + subject)
        except EnvelopeError as exc:
            raise BadRequest(400, str(exc)) from None
        if login is not None and not login.may_receive(subject):
            raise self._refusal(login, f"no permission to subscribe to {subject}", "subscriptions refused")
        self._tokens += 1
        self._hold(Snapshot(self._tokens, subject, self.settings.request_timeout), subject, request)

    def _last(self, slot: Slot, subject: str, request: h11.Request, answer: Envelope | None) -> None:
        timeout = self.settings.request_timeout
        if answer is None:
            self._answer(slot, 504, f"no cache answered within {timeout:g} s (the last value is served by "
                                    "`fyrehose cache`)\n".encode())
            return
        if answer.status == Status.NOT_FOUND:
            self._answer(slot, 404, f"the cache holds no value for {subject}\n".encode())
            return
        if answer.type != MsgType.INITIAL:
            self._answer(slot, 502, f"the cache answered {answer.type.name}/{answer.status.name}\n".encode())
            return
        headers = [("fyrehose-status", answer.status.name.lower()), ("cache-control", "no-cache")]
        seq = record_sequence(answer)
        if seq is not None:  # None only from a cache too old to report it: then no validator at all
            headers += [("etag", f'"{seq}"'), ("fyrehose-sequence", str(seq))]
        if seq is not None and _etag_matches(f'"{seq}"', request):
            fields = [SERVER, *headers]
            self.outbox.fill(slot, self.http.send(h11.Response(status_code=304, headers=fields,
                                                               reason=b"Not Modified"))
                             + self.http.send(h11.EndOfMessage()))
            self.stats["http 304"] += 1
            self._next_cycle()
            self._handle_events()
            return
        self._answer(slot, 200, answer.data, content_type="application/octet-stream", headers=headers)

    def _stream(self, path: str, request: h11.Request, login: Login | None) -> None:
        pattern = _path_text(path, "/v1/stream/")
        try:
            check_pattern(pattern)
        except EnvelopeError as exc:
            raise BadRequest(400, str(exc)) from None
        if login is not None and not login.may_subscribe(pattern):
            raise self._refusal(login, f"no permission to subscribe to {pattern}", "subscriptions refused")
        headers = [SERVER, ("content-type", "text/event-stream; charset=utf-8"), ("cache-control", "no-cache"),
                   ("x-accel-buffering", "no")]
        self.outbox.reply(self.http.send(h11.Response(status_code=200, headers=headers, reason=b"OK"))
                          + self.http.send(h11.Data(data=b": stream " + pattern.encode() + b"\n\n")))
        self.stats["http 200"] += 1
        self.stats["event streams"] += 1
        self.streaming = True
        self.requests.append(Stream(pattern, sse.parse_last_event_id(_header(request, b"last-event-id")), login))

    def _upgrade(self, request: h11.Request, login: Login | None) -> None:
        if request.method != b"GET" or (_header(request, b"upgrade") or b"").lower() != b"websocket":
            self._respond(426, b"/resp speaks RESP over WebSocket: send a WebSocket upgrade\n",
                          headers=[("upgrade", "websocket")])
            return
        key = _header(request, b"sec-websocket-key")
        if key is None or _header(request, b"sec-websocket-version") != b"13":
            self._respond(400, b"a WebSocket upgrade needs Sec-WebSocket-Key and Sec-WebSocket-Version: 13\n",
                          headers=[("sec-websocket-version", "13")])
            return
        origin = _header(request, b"origin")
        if origin is not None and not self._origin_allowed(origin.decode("latin-1"), request):
            self.stats["websocket origins refused"] += 1
            self._respond(403, b"WebSocket upgrades from this origin are not allowed (see --allow-origin)\n")
            return
        if login is not None:  # with --users: the Redis commands go on as the user this request proved
            if not login.allowed_in:
                raise self._refusal(login, "this user may do nothing", "")
            self.login = login
        fields = [(b"upgrade", b"websocket"), (b"connection", b"Upgrade"),
                  (b"sec-websocket-accept", generate_accept_token(key))]
        self.outbox.reply(self.http.send(h11.InformationalResponse(status_code=101, headers=fields,
                                                                   reason=b"Switching Protocols")))
        trailing, _ = self.http.trailing_data
        self.stats["websocket connections"] += 1
        query = urlsplit(request.target.decode("ascii", "replace")).query.split("&")
        framing = RespOverWebSocket(WsConnection(ConnectionType.SERVER), self.site.mark,
                                    with_seq="seq" in query or "seq=1" in query)
        self.outbox.framing = framing  # from here on, every RESP value is a message of its own
        endpoint = WebSocketEndpoint(self.outbox, framing, max_message=self.settings.max_message, stats=self.stats)
        self.resp = RedisConnection(self.site.redis_routes, self.deployment, self.stats,
                                    request_timeout=self.settings.request_timeout, outbox=self.outbox,
                                    now=self._clock, login=self.login)
        self.resp.requests = self.requests  # type: ignore[assignment]  # its publishes and GETs are this connection's
        endpoint.on_message = lambda message: self.resp.receive(message, self._clock)  # type: ignore[union-attr]
        self.websocket = endpoint
        self.headroom = CLOSE_HEADROOM
        if trailing:
            endpoint.receive(bytes(trailing))

    def _origin_allowed(self, origin: str, request: h11.Request) -> bool:
        allowed = self.settings.allow_origins
        if "*" in allowed or origin in allowed:
            return True
        host = (_header(request, b"host") or b"").decode("latin-1")
        scheme = "https" if self.settings.tls else "http"
        return bool(host) and origin.lower() == f"{scheme}://{host}".lower()


def _head_size(request: h11.Request) -> int:
    """The request line and headers' size as sent (give or take whitespace h11 removed)."""
    return len(request.method) + len(request.target) + 11 + sum(len(k) + len(v) + 4 for k, v in request.headers)


def _reason(status: int) -> bytes:
    return REASONS.get(status, "").encode()


@functools.cache
def _whole_head(status: int, content_type: str) -> bytes:
    """The format of a response to a request h11 never saw, as h11 writes it: the length and body go in."""
    return (b"HTTP/1.1 %d %s\r\nserver: fyrehose\r\ncontent-type: %s\r\ncontent-length: "
            % (status, _reason(status), content_type.encode())) + b"%d\r\n\r\n%s"


def _header(request: h11.Request, name: bytes) -> bytes | None:
    for key, value in request.headers:
        if key == name:
            return bytes(value)
    return None


def _etag_matches(etag: str, request: h11.Request) -> bool:
    """Whether ``If-None-Match`` (every such header line) names ``etag``: RFC 9110's weak comparison, or ``*``."""
    for key, value in request.headers:
        if key == b"if-none-match":
            for tag in bytes(value).decode("latin-1").split(","):
                tag = tag.strip()
                if tag == "*" or tag.removeprefix("W/") == etag:
                    return True
    return False


def _allow(method: bytes, *methods: bytes) -> None:
    if method not in methods:
        raise BadRequest(405, f"method {method.decode('latin-1')} not allowed here")


def _path_text(path: str, prefix: str) -> str:
    try:
        return unquote_to_bytes(path[len(prefix):]).decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest(400, "the subject is not UTF-8") from None


def _subject(path: str, prefix: str) -> str:
    subject = _path_text(path, prefix)
    try:
        check_subject(subject)
    except EnvelopeError as exc:
        raise BadRequest(400, str(exc)) from None
    return subject
