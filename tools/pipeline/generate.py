"""``pipeline generate``: a synthetic journal with known gaps and duplicates, in the journal's exact format.

For tests (whose expected gaps are known by construction) and for measuring
the jobs on journals of any size (the 10-million-message figure in
docs/pipeline.md).  Files follow the journal's layout and schema
(fyrehose.journal.parquet): one file per segment of ``segment_messages``
sequences and UTC hour, named by its first sequence, and ``gaps.jsonl`` lists
the permanent losses.  Columns are built with numpy a segment at a time, so
ten million rows take seconds and little memory.

Every payload is JSON with the publish time, ``{"t_ns":<19 digits>,"pad":"xx…"}``;
a ``raw_share`` of them are raw payloads (no subject), the rest carry the
fyrehose envelope with one of ``subjects`` subjects, chosen with weights
1, 1/2, 1/3, … so the top subjects stand out.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from fyrehose.errors import InputError
from fyrehose.journal.gapindex import FILE_NAME as GAPS_FILE
from fyrehose.journal.gapindex import Gap, encode_gap, utc_iso
from fyrehose.journal.parquet import HOUR_US, ROWS_PER_GROUP, SCHEMA, file_name, partition_of
from fyrehose.subjects.envelope import Envelope, encode

FAMILIES = ("trades", "quotes", "orders", "logs")
_JSON_HEAD = b'{"t_ns":'
_JSON_MID = b',"pad":"'
_JSON_TAIL = b'"}'
_DIGITS = 19  # t_ns of any time from 2001-09-09 to 2286-11-20
_FIXED = len(_JSON_HEAD) + _DIGITS + len(_JSON_MID) + len(_JSON_TAIL)
_POWERS = 10 ** np.arange(_DIGITS - 1, -1, -1, dtype=np.int64)


def subject_name(index: int) -> str:
    """``trades.0``, ``quotes.1``, ``orders.2``, ``logs.3``, ``trades.4``, …"""
    return f"{FAMILIES[index % len(FAMILIES)]}.{index}"


@dataclass(frozen=True)
class JournalSpec:
    messages: int  # distinct sequences the journal holds
    first_seq: int = 1
    start: datetime = datetime(2024, 5, 1, 23, 30, tzinfo=UTC)  # receive time of first_seq
    rate: float = 1000.0  # sequences per second of receive time (a missing sequence takes its slot too)
    subjects: int = 16
    raw_share: float = 0.1
    size: int = 100  # mean payload size, bytes; sizes vary from half to 1.5 times it
    missing: tuple[tuple[int, int], ...] = ()  # inclusive ranges, strictly between the first and last sequence
    duplicates: tuple[int, ...] = ()  # sequences written twice
    unrecorded: tuple[tuple[int, int], ...] = ()  # ranges of ``missing`` left out of gaps.jsonl
    latency_us: float = 800.0  # median publish-to-journal latency
    segment_messages: int = 100_000
    seed: int = 0

    @property
    def last_seq(self) -> int:
        return self.first_seq + self.messages + sum(to - lo + 1 for lo, to in self.missing) - 1

    def check(self) -> None:
        if self.messages < 2:
            raise InputError("a generated journal needs at least 2 messages")
        if self.first_seq < 1 or self.rate <= 0 or self.size < 1 or self.segment_messages < 1:
            raise InputError("first_seq, rate, size and segment_messages must be positive")
        if not 0 <= self.raw_share <= 1 or self.subjects < 0 or (self.subjects == 0 and self.raw_share < 1):
            raise InputError("raw_share must be within 0..1, and 1 when there are no subjects")
        if not datetime(2001, 9, 10, tzinfo=UTC) <= self.start <= datetime(2286, 1, 1, tzinfo=UTC):
            raise InputError("start must lie between 2001-09-10 and 2286")
        previous = self.first_seq
        for low, high in self.missing:
            if not previous < low <= high < self.last_seq:
                raise InputError(f"missing range {low}..{high} must be ordered, disjoint and inside the journal")
            previous = high + 1
        missing = set(self.missing)
        if any(gap not in missing for gap in self.unrecorded):
            raise InputError("unrecorded ranges must be among the missing ones")
        for seq in self.duplicates:
            if not self.first_seq <= seq <= self.last_seq or any(lo <= seq <= hi for lo, hi in self.missing):
                raise InputError(f"duplicate {seq} is not a sequence the journal holds")


@dataclass
class GeneratedJournal:
    path: Path
    rows: int = 0
    files: list[Path] = field(default_factory=list)


def _received_us(spec: JournalSpec, seqs: np.ndarray) -> np.ndarray:
    start_us = int(spec.start.timestamp()) * 1_000_000 + spec.start.microsecond
    return start_us + ((seqs - spec.first_seq) * (1e6 / spec.rate)).astype(np.int64)


def _payloads(spec: JournalSpec, kinds: np.ndarray, t_ns: np.ndarray, rng: np.random.Generator,
              heads: list[bytes]) -> pa.BinaryArray:
    """Envelope head (empty for raw) + the JSON object, padded so sizes spread around ``spec.size``."""
    prefix_lengths = np.array([len(head) for head in heads], dtype=np.int64)[kinds]
    wanted = (spec.size * rng.uniform(0.5, 1.5, len(kinds))).astype(np.int64)
    lengths = prefix_lengths + _FIXED + np.maximum(wanted - prefix_lengths - _FIXED, 0)
    offsets = np.zeros(len(kinds) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    buffer = np.full(int(offsets[-1]), ord("x"), dtype=np.uint8)
    digits = ((t_ns[:, None] // _POWERS) % 10 + ord("0")).astype(np.uint8)
    for kind, head in enumerate(heads):
        rows = np.flatnonzero(kinds == kind)
        if not len(rows):
            continue
        start = offsets[rows][:, None]
        lead = np.frombuffer(head + _JSON_HEAD, dtype=np.uint8)
        buffer[start + np.arange(len(lead))] = lead
        buffer[start + len(lead) + np.arange(_DIGITS)] = digits[rows]
        buffer[start + len(lead) + _DIGITS + np.arange(len(_JSON_MID))] = np.frombuffer(_JSON_MID, dtype=np.uint8)
    buffer[offsets[1:, None] - len(_JSON_TAIL) + np.arange(len(_JSON_TAIL))] = np.frombuffer(_JSON_TAIL, dtype=np.uint8)
    return pa.BinaryArray.from_buffers(pa.binary(), len(kinds),
                                       [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(buffer)])


def generate(spec: JournalSpec, path: Path) -> GeneratedJournal:
    """Write the journal ``spec`` describes under ``path`` (``path/parquet/...`` and ``path/gaps.jsonl``)."""
    spec.check()
    names = [subject_name(index) for index in range(spec.subjects)]
    heads = [encode(Envelope(name)) for name in names] + [b""]  # the last kind is a raw payload
    weights = 1 / np.arange(1, spec.subjects + 1)
    weights = weights / weights.sum() if spec.subjects else weights
    subjects = pa.array(names + [None], pa.string())
    duplicates = np.array(sorted(spec.duplicates), dtype=np.int64)
    result = GeneratedJournal(path)
    root = path / "parquet"
    for chunk, low in enumerate(range(spec.first_seq, spec.last_seq + 1, spec.segment_messages)):
        rng = np.random.default_rng([spec.seed, chunk])
        seqs = np.arange(low, min(low + spec.segment_messages, spec.last_seq + 1), dtype=np.int64)
        keep = np.ones(len(seqs), dtype=bool)
        for gap_low, gap_high in spec.missing:
            keep[max(gap_low - low, 0):max(gap_high - low + 1, 0)] = False
        seqs = seqs[keep]
        seqs = np.repeat(seqs, 1 + np.isin(seqs, duplicates))
        if not len(seqs):
            continue
        received = _received_us(spec, seqs)
        t_ns = (received - rng.lognormal(np.log(spec.latency_us), 0.5, len(seqs)).astype(np.int64)) * 1000
        raw = rng.random(len(seqs)) < spec.raw_share
        kinds = np.where(raw, spec.subjects, rng.choice(max(spec.subjects, 1), len(seqs), p=weights if spec.subjects else None))
        columns = [pa.array(seqs), pa.array(received, pa.timestamp("us", tz="UTC")), subjects.take(pa.array(kinds)),
                   _payloads(spec, kinds, t_ns, rng, heads), None]
        columns[4] = pc.binary_length(columns[3]).cast(pa.int32())
        table = pa.Table.from_arrays(columns, schema=SCHEMA)
        hours = received // HOUR_US
        cuts = np.flatnonzero(np.diff(hours)) + 1
        for begin, end in zip(np.concatenate(([0], cuts)), np.concatenate((cuts, [len(seqs)]))):
            directory = root / partition_of(int(received[begin]))
            directory.mkdir(parents=True, exist_ok=True)
            target = directory / file_name(int(seqs[begin]))
            pq.write_table(table.slice(begin, end - begin), target, row_group_size=ROWS_PER_GROUP)
            result.files.append(target)
        result.rows += len(seqs)
    unrecorded = set(spec.unrecorded)
    with open(path / GAPS_FILE, "wb") as gaps:
        for low, high in spec.missing:
            if (low, high) not in unrecorded:
                recorded_at = int(_received_us(spec, np.array([high + 1]))[0])
                gaps.write(encode_gap(Gap(low, high, utc_iso(recorded_at))))
    return result
