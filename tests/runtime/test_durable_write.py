"""write_all: every byte of every part, in order, however many parts and however short the kernel's writes."""
from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.runtime import durable
from fyrehose.runtime.durable import IOV_MAX, write_all


def test_more_parts_than_one_writev_takes(tmp_path):
    parts = [bytes([n % 256]) * (n % 7) for n in range(3 * IOV_MAX + 5)]
    path = tmp_path / "out"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        write_all(fd, parts)
    finally:
        os.close(fd)
    assert path.read_bytes() == b"".join(parts)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=30), st.integers(1, 50))
def test_short_writes_are_continued_where_they_stopped(parts, most):
    """A writev that takes fewer bytes than offered (a signal, a full disk's last block) is resumed mid-part."""
    read_end, write_end = os.pipe()
    real_writev = os.writev
    try:
        durable.os.writev = lambda fd, buffers: real_writev(fd, [bytes(b"".join(buffers))[:most]])  # type: ignore[assignment]
        write_all(write_end, parts)
    finally:
        durable.os.writev = real_writev  # type: ignore[assignment]
        os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        assert reader.read() == b"".join(parts)
