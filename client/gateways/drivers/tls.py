"""The gateways' server-side TLS context: certificate and key, and with a CA the demand for client certificates.

Every gateway takes ``--tls-cert``, ``--tls-key`` and ``--tls-ca``
(docs/security.md, "TLS"); Lumberjack leaves authentication to TLS with
certificates (docs/lumberjack.md, "TLS").  The context is gevent's subclass
of :class:`ssl.SSLContext`, whose sockets wait cooperatively, so a slow
handshake holds up only its own connection.
"""
from __future__ import annotations

import argparse
import ssl

from fyrehose.errors import InputError


def add_tls_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tls-cert", metavar="FILE", help="serve TLS with this certificate (PEM chain; with --tls-key)")
    parser.add_argument("--tls-key", metavar="FILE", help="the certificate's private key (PEM)")
    parser.add_argument("--tls-ca", metavar="FILE",
                        help="require client certificates signed by this CA (PEM); with --users, a certificate "
                             "whose subject common name is a user's name logs in as that user; needs --tls-cert")


def context_from(args: argparse.Namespace) -> ssl.SSLContext | None:
    """The TLS context the options ask for, or None; InputError (one line) for options that do not go together."""
    if bool(args.tls_cert) != bool(args.tls_key):
        raise InputError("--tls-cert and --tls-key go together")
    if args.tls_ca and not args.tls_cert:
        raise InputError("--tls-ca needs --tls-cert and --tls-key")
    return server_context(args.tls_cert, args.tls_key, args.tls_ca) if args.tls_cert else None


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
