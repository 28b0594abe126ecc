"""RESP commands parsed by hiredis's C reader where it gives exactly what the pure parser gives.

hiredis (the reader redis-py uses) parses a read of pipelined commands
about ten times faster than :class:`~fyrehose.gateways.redis.protocol.CommandParser`
(``fyrehose gateway bench --stages`` measures both).  It parses replies, not
commands, so it is used only where the two cannot differ: a read that starts
a new command with ``*`` (no partial command buffered) and that hiredis
turns, to the last byte, into arrays of bulk strings within the parser's
limits.  Anything else (inline commands, a command split across reads,
other RESP types, malformed input, limits exceeded) goes to the pure parser,
which stays the definition of what is accepted and of every error text: its
tests are the oracle, and tests/gateways/redis/test_gateway_resp_hiredis.py checks the two
agree on arbitrary input in arbitrary chunks.
"""
from __future__ import annotations

import secrets

import hiredis

from fyrehose.gateways.redis.protocol import ARG_OVERHEAD, Command, CommandParser, RespError

# A command no client can guess, fed after the read: it comes back whole as the last command only
# if the read ended exactly where a command ends (otherwise it is swallowed by, or breaks, the
# unfinished one).
_TOKEN = secrets.token_bytes(16)
_SENTINEL = b"*1\r\n$%d\r\n%s\r\n" % (len(_TOKEN), _TOKEN)


class HiredisCommandParser(CommandParser):
    """:class:`CommandParser` with hiredis's reader on the common path (whole reads of RESP arrays)."""

    _reader: hiredis.Reader | None = None  # empty after a read it parsed whole: kept for the next one

    def feed(self, data: bytes) -> list[Command | RespError]:
        if self._buffer or self._args is not None or self.failed is not None or data[:1] != b"*" or self.guarded:
            return super().feed(data)
        reader, self._reader = self._reader or hiredis.Reader(), None
        reader.feed(data)
        reader.feed(_SENTINEL)
        commands: list[Command | RespError] = []
        try:
            while (item := reader.gets()) is not False:
                if item.__class__ is not list or len(item) > self.max_args:
                    return super().feed(data)
                size = ARG_OVERHEAD * len(item)
                for argument in item:
                    if argument.__class__ is not bytes or len(argument) > self.max_bulk:
                        return super().feed(data)
                    size += len(argument)
                if size > self.max_command:  # the pure parser refuses it as it would have alone
                    return super().feed(data)
                commands.append(item)
        except (hiredis.ProtocolError, TypeError, ValueError):  # TypeError: a RESP3 map keyed by an array, ...
            return super().feed(data)  # what hiredis cannot build is the pure parser's to refuse
        if not commands or commands.pop() != [_TOKEN] or reader.has_data():
            return super().feed(data)  # the read ends inside a command: the pure parser keeps the pieces
        self._reader = reader
        return [command for command in commands if command]
