"""The HTTP gateway's pure parts: cutting RESP writes into values, and SSE events read back by an SSE parser."""
from __future__ import annotations

import base64

from hypothesis import given
from hypothesis import strategies as st

from fyrehose.gateways.http import sse
from fyrehose.gateways.http.resp_values import split_values
from fyrehose.gateways.redis import protocol as resp

# ---------------------------------------------------------------- RESP values

_scalars = st.one_of(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"),
            max_size=20).map(resp.simple),
    st.text(max_size=20).map(lambda text: resp.error("ERR " + text)),
    st.integers(-(2**63), 2**63 - 1).map(resp.integer),
    st.binary(max_size=64).map(resp.bulk),
    st.booleans().map(resp.null),
)
_values = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4).map(resp.array),
    st.tuples(st.lists(inner, max_size=4), st.booleans()).map(lambda pair: resp.push(*pair)),
    st.tuples(st.lists(st.tuples(inner, inner), max_size=3), st.booleans()).map(lambda pair: resp.mapping(*pair)),
), max_leaves=12)


@given(st.lists(_values, max_size=8))
def test_split_values_cuts_a_write_into_its_values(values):
    assert split_values(b"".join(values)) == values


def test_an_attribute_travels_with_the_value_it_annotates():
    push = resp.push([resp.bulk(b"message"), resp.bulk(b"a"), resp.bulk(b"b")], True)
    annotated = b"|1\r\n+seq\r\n:7\r\n" + push
    assert split_values(annotated + resp.integer(1)) == [annotated, resp.integer(1)]


# ---------------------------------------------------------------- SSE, read back as the WHATWG parser reads it

def parse_events(stream: bytes) -> list[tuple[str, str, str]]:
    """(id, type, data) of each dispatched event, by the HTML standard's event stream interpretation."""
    events = []
    data, kind, last_id = "", "", ""
    text = stream.decode("utf-8")
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if line == "":
            if data:
                events.append((last_id, kind or "message", data[:-1] if data.endswith("\n") else data))
            data, kind = "", ""
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "data":
            data += value + "\n"
        elif field == "event":
            kind = value
        elif field == "id" and "\0" not in value:
            last_id = value
    return events


_subjects = st.lists(st.text(alphabet="abcxyz_-:0123456789", min_size=1, max_size=8), min_size=1, max_size=4).map(".".join)


@given(st.integers(1, 2**63 - 1), _subjects, st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode)))
def test_an_event_carries_any_payload_exactly(seq, subject, payload):
    [(event_id, kind, data)] = parse_events(sse.event(seq, subject, payload) + sse.comment("between\r\nlines"))
    assert event_id == str(seq)
    if kind.endswith(sse.BASE64_SUFFIX):
        assert kind == subject + sse.BASE64_SUFFIX and not sse.is_text(payload)
        assert base64.b64decode(data, validate=True) == payload
    else:
        assert kind == subject and sse.is_text(payload)
        assert data.encode() == payload


def test_text_payloads_stay_readable():
    assert sse.event(5, "a.b", b"hello\nworld") == b"id: 5\nevent: a.b\ndata: hello\ndata: world\n\n"
    assert sse.event(6, "a.b", b"") == b"id: 6\nevent: a.b\ndata: \n\n"
    assert sse.event(7, "a.b", b"a\rb") == b"id: 7\nevent: a.b base64\ndata: YQ1i\n\n"


def test_last_event_id_is_a_sequence_or_nothing():
    assert sse.parse_last_event_id(b"42") == 42
    assert sse.parse_last_event_id(b" 42 ") == 42
    for bad in (None, b"", b"0", b"-1", b"4x", b"\xff", "٣".encode()):
        assert sse.parse_last_event_id(bad) is None


def test_the_live_views_files_are_package_data():
    """`pip install .` ships them: they are read through importlib.resources, and setup.cfg names them."""
    import configparser
    from importlib import resources
    from pathlib import Path

    from fyrehose.gateways.http.connection import STATIC_FILES

    for name, _ in STATIC_FILES.values():
        assert resources.files("fyrehose.gateways.http").joinpath("static", name).read_bytes()
    config = configparser.ConfigParser()
    config.read(Path(__file__).resolve().parents[3] / "setup.cfg")
    assert config["options.package_data"]["fyrehose.gateways.http"].strip() == "static/*"
