"""One HTTP/1.1 connection: h11's state machine, the routes, and the switch to WebSocket or SSE.

Requests are answered in order on a kept-alive connection.  The request line
and headers together are bounded (``431``), bodies by ``--max-message``
(``413``, before reading them); malformed HTTP gets h11's status (``400``) and
a close.  ``GET /resp`` with a WebSocket upgrade from an allowed origin turns
the connection into a :class:`~fyrehose.gateways.http.websocket.WebSocketEndpoint`
carrying a Redis connection; ``GET /v1/stream/<pattern>`` turns it into an SSE
response that lasts until the client leaves.
"""
from __future__ import annotations

import http
import json
import logging
from importlib import resources
from typing import TYPE_CHECKING
from urllib.parse import unquote_to_bytes, urlsplit

import gevent
import h11
from wsproto.utilities import generate_accept_token

from fyrehose.errors import FyrehoseError
from fyrehose.gateways.http import sse
from fyrehose.gateways.http.stream import EventStream
from fyrehose.gateways.http.websocket import RespMessages, WebSocketEndpoint
from fyrehose.gateways.redis.connection import RedisConnection
from fyrehose.gateways.sizes import checked
from fyrehose.protocol.codec import PayloadTooLarge
from fyrehose.subjects.envelope import Envelope, EnvelopeError, MsgType, Status, check_subject
from fyrehose.subjects.patterns import check_pattern
from fyrehose.subjects.snapshots import record_sequence

if TYPE_CHECKING:
    from fyrehose.gateways.http.gateway import HttpGateway
    from fyrehose.gateways.router import GatewayRouter
    from fyrehose.gateways.tcp import TcpClient

log = logging.getLogger("fyrehose.gateway")

STATIC_FILES = {  # path -> (file in the package's static folder, content type)
    "/": ("index.html", "text/html; charset=utf-8"),
    "/live.js": ("live.js", "text/javascript; charset=utf-8"),
    "/live.css": ("live.css", "text/css; charset=utf-8"),
}
SERVER = ("server", "fyrehose")


class BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class HttpConnection:
    """One HTTP client's connection, the :class:`fyrehose.gateways.tcp.ClientConnection` its TcpClient drives."""

    def __init__(self, client: TcpClient, gateway: HttpGateway, router: GatewayRouter) -> None:
        self.client = client
        self.gateway = gateway
        self.router = router
        self.stats = gateway.stats
        self.http = h11.Connection(h11.SERVER, max_incomplete_event_size=gateway.settings.max_head)
        self.websocket: WebSocketEndpoint | None = None
        self.resp: RedisConnection | None = None
        self.stream: EventStream | None = None
        self._request: h11.Request | None = None
        self._body: list[bytes] = []
        self._body_size = 0
        self._timer: gevent.Greenlet | None = None
        self._start_timer()

    # ------------------------------------------------------------ the driver's interface

    def receive(self, data: bytes) -> None:
        if self.websocket is not None:
            self.websocket.receive(data)
            return
        if self.stream is not None:
            return  # an SSE client has nothing more to say; what it sends is not buffered
        self.http.receive_data(data)
        self._handle_events()

    def farewell(self, reason: str) -> bytes:
        if self.websocket is not None:
            return self.websocket.farewell(reason)
        if self.stream is not None:  # the end of the chunked body, after a comment saying why
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

    def wake_at(self) -> float | None:
        return None  # the idle deadline runs on a timer greenlet of the connection's own

    def wake(self, now: float) -> None:
        """Never due: :meth:`wake_at` is always None."""

    def closed(self) -> None:
        self._stop_timer()
        if self.resp is not None:
            self.resp.closed()
        if self.stream is not None:
            self.stream.stop()

    # ------------------------------------------------------------ HTTP

    def _handle_events(self) -> None:
        while self.client.closing is None and self.websocket is None and self.stream is None:
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
                if _head_size(event) > self.gateway.settings.max_head:  # h11 bounds only what is still incomplete
                    self._fail(431, f"request line and headers over {self.gateway.settings.max_head} bytes")
                    return
                length = _header(event, b"content-length")
                if length is not None and length.isdigit() and int(length) > self.gateway.settings.max_message:
                    self._fail(413, f"body over {self.gateway.settings.max_message} bytes")
                    return
                if self.http.they_are_waiting_for_100_continue:  # curl's Expect: the body is welcome
                    self.client.send(self.http.send(h11.InformationalResponse(status_code=100, headers=[],
                                                                              reason=b"Continue")))
            elif isinstance(event, h11.Data):
                self._body_size += len(event.data)
                if self._body_size > self.gateway.settings.max_message:
                    self._fail(413, f"body over {self.gateway.settings.max_message} bytes")
                    return
                self._body.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                self._stop_timer()
                self._dispatch()
                if self.websocket is not None or self.stream is not None or self.client.closing is not None:
                    return
                if self.http.our_state is h11.MUST_CLOSE or self.http.their_state is h11.MUST_CLOSE:
                    self.client.close("request done")
                    return
                self.http.start_next_cycle()
                self._start_timer()
            elif isinstance(event, h11.ConnectionClosed):
                self.client.close("client closed")
                return

    def _start_timer(self) -> None:
        """The next request must have arrived whole within the idle timeout (slow or silent clients)."""
        self._timer = gevent.spawn_later(self.gateway.settings.idle_timeout, self._timed_out)

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.kill(block=False)
            self._timer = None

    def _timed_out(self) -> None:
        self._timer = None
        if self.client.closing is None and self.websocket is None and self.stream is None:
            self.stats["http idle timeouts"] += 1
            if self.http.their_state is h11.IDLE and not self.http.trailing_data[0]:
                self.client.close(f"idle for {self.gateway.settings.idle_timeout:g} s")  # nothing was asked
            else:
                self._fail(408, f"no complete request within {self.gateway.settings.idle_timeout:g} s")

    def _fail(self, status: int, message: str) -> None:
        """Answer a request that cannot be served (or followed) with ``status``, then hang up."""
        if self.http.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            try:
                self._respond(status, (message + "\n").encode(), close=True)
            except h11.LocalProtocolError:
                pass
        self.client.close(f"HTTP {status}: {message}")

    def _respond(self, status: int, body: bytes = b"", *, content_type: str = "text/plain; charset=utf-8",
                 headers: list[tuple[str, str]] | None = None, close: bool = False) -> None:
        fields = [SERVER, ("content-type", content_type), ("content-length", str(len(body))), *(headers or [])]
        if close:
            fields.append(("connection", "close"))
        out = self.http.send(h11.Response(status_code=status, headers=fields, reason=_reason(status)))
        if body and (self._request is None or self._request.method != b"HEAD"):
            out += self.http.send(h11.Data(data=body))
        out += self.http.send(h11.EndOfMessage())
        self.client.send(out)
        self.stats[f"http {status}"] += 1

    def _dispatch(self) -> None:
        request = self._request
        assert request is not None
        path = urlsplit(request.target.decode("ascii", "replace")).path
        method = request.method
        try:
            if path == "/resp":
                self._upgrade(request)
            elif path.startswith("/v1/publish/"):
                _allow(method, b"POST")
                self._publish(_subject(path, "/v1/publish/"))
            elif path.startswith("/v1/last/"):
                _allow(method, b"GET", b"HEAD")
                self._last(_subject(path, "/v1/last/"), request)
            elif path.startswith("/v1/stream/"):
                _allow(method, b"GET")
                self._stream(path, request)
            elif path == "/metrics":
                _allow(method, b"GET", b"HEAD")
                self._respond(200, self.gateway.metrics_text(), content_type="text/plain; version=0.0.4; charset=utf-8")
            elif path == "/healthz":
                _allow(method, b"GET", b"HEAD")
                healthy = self.gateway.healthy()
                self._respond(200 if healthy else 503, b"ok\n" if healthy else b"backbone not answering\n")
            elif path in STATIC_FILES:
                _allow(method, b"GET", b"HEAD")
                name, content_type = STATIC_FILES[path]
                body = resources.files("fyrehose.gateways.http").joinpath("static", name).read_bytes()
                self._respond(200, body, content_type=content_type, headers=[("cache-control", "no-cache")])
            else:
                raise BadRequest(404, f"no route for {path}")
        except BadRequest as exc:
            headers = [("allow", "POST")] if exc.status == 405 and path.startswith("/v1/publish/") else []
            self._respond(exc.status, (str(exc) + "\n").encode(), headers=headers)

    # ------------------------------------------------------------ routes

    def _publish(self, subject: str) -> None:
        data = b"".join(self._body)
        try:
            message = checked(Envelope(subject, data))
        except PayloadTooLarge as exc:
            raise BadRequest(413, f"payload too large for one backbone message: {exc}") from None
        except EnvelopeError as exc:
            raise BadRequest(400, str(exc)) from None
        receivers = self.gateway.receivers(subject)
        try:
            (seq,) = self.router.publish([message])
        except FyrehoseError as exc:
            self.stats["publish failures"] += 1
            raise BadRequest(503, f"publish not confirmed by the backbone: {exc}") from None
        body = json.dumps({"seq": seq, "receivers": receivers}).encode() + b"\n"
        self._respond(200, body, content_type="application/json")

    def _last(self, subject: str, request: h11.Request) -> None:
        timeout = self.gateway.settings.request_timeout
        answer = self.router.snapshot(subject, timeout=timeout)
        if answer is None:
            raise BadRequest(504, f"no cache answered within {timeout:g} s (the last value is served by `fyrehose cache`)")
        if answer.status == Status.NOT_FOUND:
            raise BadRequest(404, f"the cache holds no value for {subject}")
        if answer.type != MsgType.INITIAL:
            raise BadRequest(502, f"the cache answered {answer.type.name}/{answer.status.name}")
        headers = [("fyrehose-status", answer.status.name.lower()), ("cache-control", "no-cache")]
        seq = record_sequence(answer)
        if seq is not None:  # None only from a cache too old to report it: then no validator at all
            headers += [("etag", f'"{seq}"'), ("fyrehose-sequence", str(seq))]
        if seq is not None and _etag_matches(f'"{seq}"', request):
            fields = [SERVER, *headers]
            self.client.send(self.http.send(h11.Response(status_code=304, headers=fields, reason=b"Not Modified"))
                             + self.http.send(h11.EndOfMessage()))
            self.stats["http 304"] += 1
            return
        self._respond(200, answer.data, content_type="application/octet-stream", headers=headers)

    def _stream(self, path: str, request: h11.Request) -> None:
        pattern = _path_text(path, "/v1/stream/")
        try:
            check_pattern(pattern)
        except EnvelopeError as exc:
            raise BadRequest(400, str(exc)) from None
        headers = [SERVER, ("content-type", "text/event-stream; charset=utf-8"), ("cache-control", "no-cache"),
                   ("x-accel-buffering", "no")]
        self.client.send(self.http.send(h11.Response(status_code=200, headers=headers, reason=b"OK"))
                         + self.http.send(h11.Data(data=b": stream " + pattern.encode() + b"\n\n")))
        self.stats["http 200"] += 1
        self.stats["event streams"] += 1
        self.stream = EventStream(self.client, self.gateway, pattern,
                              lambda data: self.http.send(h11.Data(data=data)))
        self.stream.start(sse.parse_last_event_id(_header(request, b"last-event-id")))

    def _upgrade(self, request: h11.Request) -> None:
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
            log.warning("%s: WebSocket upgrade from origin %s refused", self.client.peer, origin[:200])
            self._respond(403, b"WebSocket upgrades from this origin are not allowed (see --allow-origin)\n")
            return
        fields = [(b"upgrade", b"websocket"), (b"connection", b"Upgrade"),
                  (b"sec-websocket-accept", generate_accept_token(key))]
        self.client.send(self.http.send(h11.InformationalResponse(status_code=101, headers=fields, reason=b"Switching Protocols")))
        trailing, _ = self.http.trailing_data
        self.stats["websocket connections"] += 1
        endpoint = WebSocketEndpoint(self.client, max_message=self.gateway.settings.max_message, stats=self.stats)
        query = urlsplit(request.target.decode("ascii", "replace")).query
        wants_seq = "seq" in query.split("&") or "seq=1" in query.split("&")
        self.resp = RedisConnection(RespMessages(endpoint, self.gateway.mark, with_seq=wants_seq),  # type: ignore[arg-type]  # RespMessages in place of a TcpClient
                                 self.gateway.redis_routes, self.router, self.stats,
                                 request_timeout=self.gateway.settings.request_timeout)
        endpoint.on_message = self.resp.receive
        self.websocket = endpoint
        if trailing:
            endpoint.receive(bytes(trailing))

    def _origin_allowed(self, origin: str, request: h11.Request) -> bool:
        allowed = self.gateway.settings.allow_origins
        if "*" in allowed or origin in allowed:
            return True
        host = (_header(request, b"host") or b"").decode("latin-1")
        scheme = "https" if self.gateway.settings.tls else "http"
        return bool(host) and origin.lower() == f"{scheme}://{host}".lower()


def _head_size(request: h11.Request) -> int:
    """The request line and headers' size as sent (give or take whitespace h11 removed)."""
    return len(request.method) + len(request.target) + 11 + sum(len(k) + len(v) + 4 for k, v in request.headers)


def _reason(status: int) -> bytes:
    try:
        return http.HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


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
