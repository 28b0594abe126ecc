"""The Redis gateway's pure parts: the RESP command parser and the Redis glob matcher."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.gateways.incremental import Malformed
from fyrehose.gateways.redis import protocol as resp
from fyrehose.runtime.process import ChildProcess
from fyrehose.subjects.redis_glob import match, translate

from support import EVENT_WITHIN, LOOPBACK, free_port, wait_until

args = st.lists(st.binary(max_size=40), min_size=1, max_size=5)


def encode_command(command: list[bytes]) -> bytes:
    return b"*%d\r\n" % len(command) + b"".join(b"$%d\r\n%s\r\n" % (len(arg), arg) for arg in command)


def chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({cut % (len(data) + 1) for cut in cuts})
    pieces, start = [], 0
    for point in points + [len(data)]:
        pieces.append(data[start:point])
        start = point
    return pieces


def feed_all(parser: resp.CommandParser, pieces: list[bytes]) -> list:
    out = []
    for piece in pieces:
        out.extend(parser.feed(piece))
    return out


@given(st.lists(args, max_size=8), st.lists(st.integers(min_value=0), max_size=20))
def test_multibulk_commands_survive_any_chunking(commands, cuts):
    data = b"".join(encode_command(command) for command in commands)
    assert feed_all(resp.CommandParser(), chunks(data, cuts)) == commands


words = st.lists(st.binary(min_size=1, max_size=10).filter(
    lambda word: not any(byte in word for byte in b" \t\r\n\"'\\\x00\x0b\x0c")),  # NUL ends a line for Redis
    min_size=1, max_size=4).filter(lambda command: not command[0].startswith(b"*"))  # '*' starts multibulk


@given(st.lists(words, max_size=6), st.lists(st.integers(min_value=0), max_size=10))
def test_inline_commands_survive_any_chunking(commands, cuts):
    data = b"".join(b" ".join(command) + b"\r\n" for command in commands)
    assert feed_all(resp.CommandParser(), chunks(data, cuts)) == commands


def test_inline_quotes_and_blank_lines():
    parser = resp.CommandParser()
    assert parser.feed(b'\r\nPUBLISH "a channel" \'two words\'\n') == [[b"PUBLISH", b"a channel", b"two words"]]
    assert parser.feed(b'PING "unbalanced\r\n') == [resp.RespError("Protocol error: unbalanced quotes in request")]


@settings(max_examples=300)
@given(st.lists(st.binary(max_size=30), max_size=8))
def test_garbage_yields_commands_then_at_most_one_error(pieces):
    parser = resp.CommandParser(max_bulk=64)
    out = feed_all(parser, pieces)
    errors = [item for item in out if isinstance(item, resp.RespError)]
    assert len(errors) <= 1
    if errors:
        assert out[-1] is errors[0] and errors[0].message.startswith("Protocol error")
        assert parser.feed(b"*1\r\n$4\r\nPING\r\n") == []  # nothing after a malformed stream
    assert all(isinstance(item, list) and item and all(isinstance(arg, bytes) for arg in item)
               for item in out if not isinstance(item, resp.RespError))


def test_oversized_input_is_refused_before_it_arrives():
    parser = resp.CommandParser(max_bulk=1000)
    assert parser.feed(b"*1\r\n$1001\r\n") == [resp.RespError("Protocol error: invalid bulk length")]
    parser = resp.CommandParser()
    assert parser.feed(b"*1\r\n" + b"x" * (resp.MAX_INLINE + 10)) == [
        resp.RespError("Protocol error: expected '$', got 'x'")]
    parser = resp.CommandParser()
    assert parser.feed(b"P" * (resp.MAX_INLINE + 10)) == [resp.RespError("Protocol error: too big inline request")]
    parser = resp.CommandParser()
    assert parser.feed(b"*99999999999\r\n") == [resp.RespError("Protocol error: invalid multibulk length")]


def test_reply_encoders():
    assert resp.push([resp.bulk(b"message"), resp.bulk(b"c"), resp.bulk(b"d")], True) == \
        b">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nd\r\n"
    assert resp.push([resp.integer(1)], False) == b"*1\r\n:1\r\n"
    assert resp.mapping([(resp.bulk(b"proto"), resp.integer(3))], True) == b"%1\r\n$5\r\nproto\r\n:3\r\n"
    assert resp.mapping([(resp.bulk(b"proto"), resp.integer(2))], False) == b"*2\r\n$5\r\nproto\r\n:2\r\n"
    assert resp.null(True) == b"_\r\n" and resp.null(False) == b"$-1\r\n"
    assert resp.error("ERR two\r\nlines") == b"-ERR two  lines\r\n"


# ---------------------------------------------------------------- glob patterns

def stringmatch(pattern: bytes, string: bytes) -> bool:
    """Redis's stringmatchlen (util.c), transcribed step by step: the oracle for the regex translation."""
    p, s = 0, 0
    while p < len(pattern) and s < len(string):
        char = pattern[p]
        if char == ord("*"):
            while p + 1 < len(pattern) and pattern[p + 1] == ord("*"):
                p += 1
            if p + 1 == len(pattern):
                return True
            return any(stringmatch(pattern[p + 1:], string[start:]) for start in range(s, len(string)))
        if char == ord("?"):
            s += 1
        elif char == ord("["):
            p += 1
            negate = p < len(pattern) and pattern[p] == ord("^")
            if negate:
                p += 1
            matched = False
            while True:
                if len(pattern) - p >= 2 and pattern[p] == ord("\\"):
                    p += 1
                    matched |= pattern[p] == string[s]
                elif p >= len(pattern):
                    p -= 1
                    break
                elif pattern[p] == ord("]"):
                    break
                elif len(pattern) - p >= 3 and pattern[p + 1] == ord("-"):
                    low, high = sorted((pattern[p], pattern[p + 2]))
                    matched |= low <= string[s] <= high
                    p += 2
                else:
                    matched |= pattern[p] == string[s]
                p += 1
            if matched == negate:
                return False
            s += 1
        else:
            if char == ord("\\") and len(pattern) - p >= 2:
                p += 1
            if pattern[p] != string[s]:
                return False
            s += 1
        p += 1
        if s == len(string):
            while p < len(pattern) and pattern[p] == ord("*"):
                p += 1
            break
    return p == len(pattern) and s == len(string)


glob_bytes = st.binary(max_size=8).map(lambda raw: bytes(b"ab*?[]^-\\"[byte % 9] for byte in raw))
channel_bytes = st.binary(max_size=8).map(lambda raw: bytes(b"ab]-^\\["[byte % 7] for byte in raw))


@settings(max_examples=600)
@given(glob_bytes, channel_bytes)
def test_glob_matches_like_redis_stringmatchlen(pattern, channel):
    assert match(pattern, channel) == stringmatch(pattern, channel), translate(pattern)


def test_glob_examples():
    assert match(b"news.*", b"news.sports") and not match(b"news.*", b"weather")
    assert match(b"h?llo", b"hello") and match(b"h[^e]llo", b"hallo") and not match(b"h[^e]llo", b"hello")
    assert match(b"h[a-b]llo", b"hbllo") and match(b"h[b-a]llo", b"hallo")
    assert match(b"\\*", b"*") and not match(b"\\*", b"x")
    assert not match(b"*", b"")  # Redis: the empty channel matches only the empty pattern


def test_glob_agrees_with_a_real_redis_server(tmp_path):
    """A sample of tricky pattern/channel pairs, asked of redis-server itself."""
    import redis

    port = free_port()
    with ChildProcess(["redis-server", "--port", str(port), "--bind", LOOPBACK, "--save", "", "--appendonly", "no",
                       "--dir", str(tmp_path)], tmp_path / "redis-server.log"):
        client = redis.Redis(host=LOOPBACK, port=port, socket_timeout=5)
        assert wait_until(lambda: _pings(client), timeout=EVENT_WITHIN)
        rng = random.Random(8)
        patterns = sorted({bytes(rng.choice(b"ab*?[]^-\\") for _ in range(rng.randint(1, 6))) for _ in range(60)})
        channels = sorted({bytes(rng.choice(b"ab]-^\\[") for _ in range(rng.randint(1, 5))) for _ in range(40)})
        pubsub = client.pubsub()
        pubsub.psubscribe(*patterns)
        assert wait_until(lambda: client.pubsub_numpat() == len(patterns), timeout=EVENT_WITHIN)
        for channel in channels:
            expected = sum(match(pattern, channel) for pattern in patterns)
            assert client.publish(channel, b"x") == expected, channel
        pubsub.close()
        client.close()


def _pings(client) -> bool:
    import redis

    try:
        return client.ping()
    except redis.ConnectionError:
        return False


@pytest.mark.parametrize("pattern", [b"[", b"[^", b"\\", b"a[\\", b"[a-", b"[]]", b"**?*"])
def test_glob_edge_patterns_compile(pattern):
    assert match(pattern, b"a") == stringmatch(pattern, b"a")


# ---------------------------------------------------------------- inline commands and size limits

def sdssplitargs(line: bytes) -> list[bytes] | None:
    """Redis's sdssplitargs (sds.c), transcribed step by step: the oracle for the inline splitter (None: error)."""
    line = line + b"\0"
    args, p = [], 0
    space = b" \t\n\v\f\r"
    while True:
        while line[p] and line[p] in space:
            p += 1
        if not line[p]:
            return args
        current, inq, insq, done = bytearray(), False, False, False
        while not done:
            c = line[p]
            if inq:
                if c == 0x5C and line[p + 1:p + 2] == b"x" and _hex(line[p + 2:p + 3]) and _hex(line[p + 3:p + 4]):
                    current.append(int(line[p + 2:p + 4], 16))
                    p += 3
                elif c == 0x5C and line[p + 1]:
                    p += 1
                    current += {ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t", ord("b"): b"\b",
                                ord("a"): b"\a"}.get(line[p], bytes((line[p],)))
                elif c == ord('"'):
                    if line[p + 1] and line[p + 1] not in space:
                        return None
                    done = True
                elif not c:
                    return None
                else:
                    current.append(c)
            elif insq:
                if c == 0x5C and line[p + 1] == ord("'"):
                    p += 1
                    current.append(ord("'"))
                elif c == ord("'"):
                    if line[p + 1] and line[p + 1] not in space:
                        return None
                    done = True
                elif not c:
                    return None
                else:
                    current.append(c)
            elif c in b" \n\r\t\0":
                done = True
            elif c == ord('"'):
                inq = True
            elif c == ord("'"):
                insq = True
            else:
                current.append(c)
            if line[p]:
                p += 1
        args.append(bytes(current))


def _hex(char: bytes) -> bool:
    return len(char) == 1 and char in b"0123456789abcdefABCDEF"


inline_lines = st.binary(max_size=24).map(lambda raw: bytes(b"ab \t\"'\\xn1F\x0b\x00"[byte % 13] for byte in raw))


@settings(max_examples=2000)
@given(inline_lines)
def test_inline_commands_split_as_redis_sdssplitargs(line):
    expected = sdssplitargs(line)
    if expected is None:
        with pytest.raises(Malformed):
            resp.split_inline(line)
    else:
        assert resp.split_inline(line) == expected


def test_inline_floods_are_parsed_in_bulk():
    parser = resp.CommandParser()
    assert parser.feed(b"\r\n" * 50000 + b"PING\r\n") == [[b"PING"]]
    assert parser.feed(b'SET "' + b"a" * 60000 + b'"\r\n') == [[b"SET", b"a" * 60000]]


def test_one_command_is_bounded_in_total_not_only_per_argument():
    parser = resp.CommandParser(max_bulk=1 << 20, max_command=4 << 20)
    head = b"*100000\r\n$9\r\nSUBSCRIBE\r\n"
    bulk = b"$1048576\r\n" + b"x" * (1 << 20) + b"\r\n"
    out = parser.feed(head + bulk * 3)
    assert out == [] and parser.failed is None
    assert parser.held == (9 + resp.ARG_OVERHEAD) + 3 * ((1 << 20) + resp.ARG_OVERHEAD)  # what it holds, counted
    assert parser.feed(bulk[:20]) == [resp.RespError(f"Protocol error: command larger than {4 << 20} bytes")]
    assert len(parser._buffer) == 0  # what it held is let go at once
    empty = resp.CommandParser(max_command=64 * 1000)
    assert empty.feed(b"*1000000\r\n" + b"$0\r\n\r\n" * 2000)[-1].message.startswith("Protocol error: command larger")
