"""What ``fyrehose top`` shows, computed from two readings of each endpoint: pure, so every figure is tested alone.

An endpoint is told apart by what it exports (a backbone has
``fyrehose_pushes_total``, a journal ``fyrehose_journal_head``, a cache
``fyrehose_cache_position``, a gateway ``fyrehose_gateway_up``), so the
command needs no kind per endpoint.  Rates are
the growth of a counter between two readings divided by the time between
them; a counter that went down was reset by a restart, and counts from zero.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fyrehose.tools.watch.exposition import Scrape

SORT_KEYS = ("endpoint", "rate", "lag", "errors")
BACKBONE, JOURNAL, CACHE, GATEWAY, UNKNOWN = "backbone", "journal", "cache", "gateway", "unknown"


@dataclass(frozen=True)
class Reading:
    """One endpoint read once: its samples, or why it could not be read."""

    endpoint: str
    at: float  # monotonic seconds
    scrape: Scrape | None
    error: str | None = None


@dataclass(frozen=True)
class Row:
    cells: tuple[str, ...]
    endpoint: str
    rate: float  # messages/s through this process
    lag: float  # messages behind
    errors: float  # drops, refusals and losses per second


@dataclass(frozen=True)
class Section:
    title: str
    columns: tuple[str, ...]
    rows: tuple[Row, ...]


@dataclass(frozen=True)
class Screen:
    summary: str
    sections: tuple[Section, ...]
    sort: str


def resort(screen: Screen, sort: str) -> Screen:
    """The same figures in another order (a key pressed between two readings)."""
    return Screen(screen.summary, tuple(Section(section.title, section.columns, sort_rows(section.rows, sort))
                                        for section in screen.sections), sort)


def kind_of(scrape: Scrape) -> str:
    if scrape.has("fyrehose_pushes_total"):
        return BACKBONE
    if scrape.has("fyrehose_journal_head"):
        return JOURNAL
    if scrape.has("fyrehose_cache_position"):
        return CACHE
    if scrape.has("fyrehose_gateway_up"):
        return GATEWAY
    return UNKNOWN


class _Readings:
    """The previous and the current reading of one endpoint, and the rates between them."""

    def __init__(self, previous: Reading | None, current: Reading) -> None:
        assert current.scrape is not None
        self.now = current.scrape
        self.before = previous.scrape if previous is not None else None
        self.seconds = current.at - previous.at if previous is not None else 0.0

    def value(self, name: str, where: Mapping[str, str] | None = None) -> float | None:
        return self.now.total(name, where)

    def rate(self, name: str, where: Mapping[str, str] | None = None) -> float | None:
        """Per second between the readings; None with one reading only, 0 for a counter not exported yet."""
        if self.before is None or self.seconds <= 0:
            return None
        now = self.now.total(name, where) or 0.0
        before = self.before.total(name, where) or 0.0
        grown = now - before if now >= before else now  # went down: the process restarted, counting from 0
        return grown / self.seconds


def number(value: float | None) -> str:
    """A count or a rate as a person reads it: thousands separated, a decimal only below 10."""
    if value is None:
        return "-"
    if value != value:  # NaN
        return "nan"
    if abs(value) >= 10 or value == int(value):
        return f"{value:,.0f}"
    return f"{value:.1f}"


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return "none" if value < 0 else f"{value:.2f}s"


def _sum(*values: float | None) -> float | None:
    present = [value for value in values if value is not None]
    return sum(present) if present else None


def _role(readings: _Readings) -> str:
    primary = readings.value("fyrehose_pair_role_primary")
    if primary is not None:
        return "primary" if primary else "standby"
    return "pipeline" if readings.now.has("fyrehose_ring_fill_ratio") else "single"


def _backbone(readings: _Readings, endpoint: str) -> tuple[Row, Row, Row | None]:
    """The backbone's row, its losses-and-recovery row, and its standby pair row when it is a pair member."""
    inbound, outbound = readings.rate("fyrehose_pushes_total"), readings.rate("fyrehose_delivered_total")
    drops = readings.rate("fyrehose_dropped_total")
    gone = readings.rate("fyrehose_gone_answers_total")
    subscribers = _sum(readings.value("fyrehose_subscribers"), readings.value("fyrehose_multicast_subscribers"))
    lag = readings.value("fyrehose_pair_replication_lag_messages")
    errors = (drops or 0.0) + (gone or 0.0)
    role = _role(readings)
    row = Row((endpoint, role, number(readings.value("fyrehose_last_sequence")), number(inbound), number(outbound),
               number(subscribers), number(readings.value("fyrehose_clients")),
               number(readings.value("fyrehose_journaling_clients"))),
              endpoint, inbound or 0.0, lag or 0.0, errors)
    recovery = Row((endpoint, number(drops), number(readings.rate("fyrehose_requests_total")),
                    number(readings.rate("fyrehose_forwards_total")), number(readings.rate("fyrehose_redelivered_total")),
                    number(gone), number(readings.value("fyrehose_worker_restarts_total"))),
                   endpoint, inbound or 0.0, lag or 0.0, errors)
    if role not in ("primary", "standby"):
        return row, recovery, None
    attached = readings.value("fyrehose_pair_standby_attached")
    standby = "-" if role == "standby" or attached is None else ("attached" if attached else "DETACHED")
    member = Row((endpoint, role, number(readings.value("fyrehose_pair_epoch")), standby, number(lag),
                  seconds(readings.value("fyrehose_pair_replication_lag_seconds")),
                  number(readings.value("fyrehose_pair_takeovers_total")), number(readings.value("fyrehose_pair_fenced_total")),
                  number(readings.value("fyrehose_pair_gone_total"))),
                 endpoint, readings.rate("fyrehose_pair_replicated_total") or inbound or 0.0, lag or 0.0,
                 readings.rate("fyrehose_pair_gone_total") or 0.0)
    return row, recovery, member


def _journal(readings: _Readings, endpoint: str) -> Row:
    written, lost = readings.rate("fyrehose_journal_written_total"), readings.rate("fyrehose_journal_lost_total")
    lag = readings.value("fyrehose_journal_lag_messages")
    return Row((endpoint, number(readings.value("fyrehose_journal_head")), number(lag),
                seconds(readings.value("fyrehose_journal_lag_seconds")), number(written),
                number(readings.rate("fyrehose_journal_forwarded_total")),
                number(readings.value("fyrehose_journal_lost_total")),
                seconds(readings.value("fyrehose_journal_fsync_seconds_max"))),
               endpoint, written or 0.0, lag or 0.0, lost or 0.0)


# Every way a gateway says no: clients over its limits, logins, and publishes and subscriptions outside a user's rights
GATEWAY_REFUSALS = ("fyrehose_gateway_refused_connections_total", "fyrehose_gateway_connections_refused_total",
                    "fyrehose_gateway_refused_connections_per_address_total",
                    "fyrehose_gateway_logins_refused_total", "fyrehose_gateway_logins_throttled_total",
                    "fyrehose_gateway_publishes_refused_total", "fyrehose_gateway_subscriptions_refused_total")


def _cache(readings: _Readings, endpoint: str) -> Row:
    updates, lag = readings.rate("fyrehose_cache_updates_total"), readings.value("fyrehose_cache_lag_messages")
    losses = readings.rate("fyrehose_cache_losses_total")
    return Row((endpoint, number(readings.value("fyrehose_cache_position")), number(lag),
                number(readings.value("fyrehose_cache_records")), number(updates),
                number(readings.rate("fyrehose_cache_snapshots_total")),
                number(readings.value("fyrehose_cache_losses_total") or 0.0)),
               endpoint, updates or 0.0, lag or 0.0, losses or 0.0)


def _gateway(readings: _Readings, endpoint: str) -> Row:
    kinds = readings.now.by_label("fyrehose_gateway_up", "kind")
    up = readings.value("fyrehose_gateway_up")
    published = readings.rate("fyrehose_gateway_published_total")
    rates = [rate for rate in (readings.rate(name) for name in GATEWAY_REFUSALS) if rate is not None]
    refused = sum(rates) if rates else None
    lost = readings.rate("fyrehose_gateway_lost_total")
    return Row((endpoint, ",".join(sorted(kinds)) or "?", "up" if up else "DOWN",
                number(readings.value("fyrehose_gateway_clients")),
                number(readings.value("fyrehose_gateway_position")), number(published),
                number(readings.rate("fyrehose_gateway_connections_total")), number(refused),
                number(readings.value("fyrehose_gateway_lost_total") or 0.0)),
               endpoint, published or 0.0, 0.0, (refused or 0.0) + (lost or 0.0))


_COLUMNS = {
    BACKBONE: ("ENDPOINT", "ROLE", "SEQ", "IN/s", "OUT/s", "SUBS", "CLIENTS", "JOURNALING"),
    "recovery": ("ENDPOINT", "DROPS/s", "REQUESTS/s", "FORWARDS/s", "REDELIV/s", "GONE/s", "RESTARTS"),
    "pair": ("ENDPOINT", "ROLE", "EPOCH", "STANDBY", "LAG MSGS", "LAG", "TAKEOVERS", "FENCED", "GONE"),
    JOURNAL: ("ENDPOINT", "HEAD", "LAG MSGS", "LAG", "WRITTEN/s", "FWD/s", "LOST", "FSYNC MAX"),
    CACHE: ("ENDPOINT", "POSITION", "LAG MSGS", "RECORDS", "UPDATES/s", "SNAPS/s", "LOSSES"),
    GATEWAY: ("ENDPOINT", "KIND", "BACKBONE", "CLIENTS", "POSITION", "PUB/s", "CONN/s", "REFUSED/s", "LOST"),
    UNKNOWN: ("ENDPOINT", "PROBLEM"),
}
_TITLES = {BACKBONE: "backbones", "recovery": "losses and recovery", "pair": "standby pair", JOURNAL: "journals", CACHE: "caches",
           GATEWAY: "gateways",
           UNKNOWN: "not read"}


def sort_rows(rows: Sequence[Row], key: str) -> tuple[Row, ...]:
    """By endpoint, or the highest rate, lag or error rate first (ties by endpoint)."""
    if key not in SORT_KEYS:
        raise ValueError(f"unknown sort key {key!r}")
    if key == "endpoint":
        return tuple(sorted(rows, key=lambda row: row.endpoint))
    return tuple(sorted(rows, key=lambda row: (-getattr(row, key), row.endpoint)))


def build(previous: Mapping[str, Reading], current: Sequence[Reading], sort: str = "endpoint") -> Screen:
    """The screen for ``current``, with rates since ``previous`` (readings by endpoint; empty: no rates yet)."""
    rows: dict[str, list[Row]] = {kind: [] for kind in _COLUMNS}
    inbound = outbound = 0.0
    unread = 0
    for reading in current:
        if reading.scrape is None:
            unread += 1
            rows[UNKNOWN].append(Row((reading.endpoint, reading.error or "not read"), reading.endpoint, 0, 0, 1))
            continue
        readings = _Readings(previous.get(reading.endpoint), reading)
        kind = kind_of(reading.scrape)
        if kind == BACKBONE:
            row, recovery, member = _backbone(readings, reading.endpoint)
            rows[BACKBONE].append(row)
            rows["recovery"].append(recovery)
            if member is not None:
                rows["pair"].append(member)
            if _role(readings) != "standby":
                inbound += readings.rate("fyrehose_pushes_total") or 0.0
                outbound += readings.rate("fyrehose_delivered_total") or 0.0
        elif kind == JOURNAL:
            rows[JOURNAL].append(_journal(readings, reading.endpoint))
        elif kind == CACHE:
            rows[CACHE].append(_cache(readings, reading.endpoint))
        elif kind == GATEWAY:
            rows[GATEWAY].append(_gateway(readings, reading.endpoint))
        else:
            unread += 1
            rows[UNKNOWN].append(Row((reading.endpoint, "no fyrehose metrics here"), reading.endpoint, 0, 0, 1))
    rated = bool(previous)
    summary = (f"{len(current)} endpoints, {unread} not read · in {number(inbound) if rated else '-'} msgs/s · "
               f"out {number(outbound) if rated else '-'} msgs/s")
    sections = tuple(Section(_TITLES[kind], _COLUMNS[kind], sort_rows(found, sort))
                     for kind, found in rows.items() if found)
    return Screen(summary, sections, sort)
