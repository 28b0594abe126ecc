"""A read's RESP commands in one compiled pass: arrays of bulk strings, as every client library sends them.

A client library sends each command as ``*<count>\\r\\n`` and, per argument,
``$<length>\\r\\n<bytes>\\r\\n``.  The general parser
(:class:`~fyrehose.gateways.redis.protocol.CommandParser`) finds, copies and
converts each of those lines and steps a state machine per argument; here a
read's commands are one pass over its bytes with machine-integer offsets
(compiled, docs/architecture.md).  The pass stops at the first thing that is
not such a command, wholly received and within the parser's limits (an inline
command, ``*0``, a sign or a space in a number, a limit exceeded, a command
cut by the end of the read): what follows is the general parser's, which
gives the same commands and the same errors for it.  This step decides
nothing of its own.
"""
from __future__ import annotations

_STAR, _DOLLAR, _CR, _LF, _ZERO, _NINE = 42, 36, 13, 10, 48, 57
_MAX_DIGITS = 18  # a longer count or length is beyond every limit (the general parser says so), and fits 63 bits
_ARG_OVERHEAD = 64  # protocol.ARG_OVERHEAD: what an argument counts beyond its length towards max_command


def whole_commands(data: bytes, max_bulk: int, max_args: int, max_command: int) -> tuple[list[list[bytes]], int]:
    """The commands ``data`` starts with and where the first byte not read starts (``len(data)``: all read).

    The limits are the general parser's: ``max_bulk`` bytes per argument,
    ``max_args`` arguments, ``max_command`` bytes per command counting
    :data:`_ARG_OVERHEAD` per argument.
    """
    size = len(data)
    commands: list[list[bytes]] = []
    pos = 0
    while pos < size and data[pos] == _STAR:
        args: list[bytes] = []
        end = _command(data, pos, size, args, max_bulk, max_args, max_command)
        if end < 0:
            break
        commands.append(args)
        pos = end
    return (commands, pos)


def _command(data: bytes, pos: int, size: int, args: list[bytes], max_bulk: int, max_args: int,
             max_command: int) -> int:
    """Where the command at ``pos`` ends, its arguments appended to ``args``; -1 when it is not read here."""
    index = _number_end(data, pos + 1, size)
    if index < 0:
        return -1
    count = _number(data, pos + 1, index)
    if count == 0 or count > max_args:
        return -1
    index += 2
    total = 0
    while count:
        if index >= size or data[index] != _DOLLAR:
            return -1
        start = index + 1
        index = _number_end(data, start, size)
        if index < 0:
            return -1
        length = _number(data, start, index)
        total += length + _ARG_OVERHEAD
        if length > max_bulk or total > max_command:
            return -1
        start = index + 2
        index = start + length
        if index + 2 > size:
            return -1
        args.append(data[start:index])
        index += 2  # the two bytes after a bulk string are skipped unread, as the general parser skips them
        count -= 1
    return index


def _number_end(data: bytes, start: int, size: int) -> int:
    """Where the CRLF after the decimal digits at ``start`` is; -1 for no digits, too many, or anything else after."""
    index = start
    while index < size and _ZERO <= data[index] <= _NINE:
        index += 1
        if index - start > _MAX_DIGITS:
            return -1
    if index == start or index + 1 >= size or data[index] != _CR or data[index + 1] != _LF:
        return -1
    return index


def _number(data: bytes, start: int, end: int) -> int:
    """The decimal digits from ``start`` to ``end``, as a number."""
    value = 0
    for index in range(start, end):
        value = value * 10 + (data[index] - _ZERO)
    return value
