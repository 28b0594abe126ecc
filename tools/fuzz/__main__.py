"""``python -m fyrehose.tools.fuzz TARGET ...``: one command for every UDP endpoint.

``backbone`` runs :mod:`fyrehose.tools.fuzz.backbone` (both backbone modes);
``http`` runs :mod:`fyrehose.tools.fuzz.http_gateway` (the HTTP/WebSocket gateway over TCP);
``sub``, ``journal``, ``cache``, ``redis``, ``nats``, ``marlin``,
``lumberjack`` and ``all`` run :mod:`fyrehose.tools.fuzz.endpoint` (their UDP
sockets); ``gateway`` runs :mod:`fyrehose.tools.fuzz.gateway` (the TCP
gateways, as a hostile client).  The options are those of the module that runs.
"""
from __future__ import annotations

import sys

from fyrehose.tools.fuzz import backbone, endpoint, gateway, http_gateway


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    targets = ("backbone", *endpoint.ENDPOINTS, "all", "http", "gateway")
    if not argv or argv[0] not in targets:
        sys.stderr.write(f"python -m fyrehose.tools.fuzz: error: the first argument is one of {', '.join(targets)}\n")
        return 2
    if argv[0] == "backbone":
        return backbone.main(argv[1:])
    if argv[0] == "http":
        return http_gateway.main(argv[1:])
    if argv[0] == "gateway":
        return gateway.main(argv[1:])
    return endpoint.main(argv)


if __name__ == "__main__":
    sys.exit(main())
