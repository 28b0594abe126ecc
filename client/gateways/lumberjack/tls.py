"""The server-side TLS context: certificate and key, and with a CA the demand for client certificates.

Lumberjack leaves authentication and encryption to TLS with certificates
(docs/lumberjack.md, "TLS").  The context is
gevent's subclass of :class:`ssl.SSLContext`, whose sockets wait
cooperatively, so a slow handshake holds up only its own connection.
"""
from __future__ import annotations

import ssl

from fyrehose.errors import InputError


def server_context(cert: str, key: str, ca: str | None = None) -> ssl.SSLContext:
    """TLS 1.2 or newer; with ``ca``, a client must present a certificate signed by it."""
    from gevent import ssl as gevent_ssl

    context = gevent_ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise InputError(f"cannot load TLS certificate {cert!r} with key {key!r}: {exc}") from None
    if ca is not None:
        try:
            context.load_verify_locations(cafile=ca)
        except (OSError, ssl.SSLError) as exc:
            raise InputError(f"cannot load TLS CA file {ca!r}: {exc}") from None
        context.verify_mode = ssl.CERT_REQUIRED
    return context
