"""The deployment kit's code: keepalived's configuration and scripts for a hot standby backbone pair.

The rest of the kit is files: ``tools/systemd/`` (units) and ``tools/sysctl/``
(kernel settings), described in docs/operations.md ("Deploying a standby pair").
"""
