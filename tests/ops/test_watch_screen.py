"""What fyrehose top shows, from two readings: each kind of process told apart by what it exports, rates between
readings (a restarted counter counts from zero), the pair's roles and lag, sorting, endpoints that could not be
read."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fyrehose.tools.watch.exposition import parse
from fyrehose.tools.watch.screen import (
    BACKBONE,
    CACHE,
    GATEWAY,
    JOURNAL,
    UNKNOWN,
    Reading,
    build,
    kind_of,
    number,
    resort,
    sort_rows,
)

SINGLE = """fyrehose_pushes_total {pushes}
fyrehose_delivered_total {delivered}
fyrehose_requests_total 4
fyrehose_forwards_total 2
fyrehose_gone_answers_total 0
fyrehose_dropped_total{{reason="malformed"}} {dropped}
fyrehose_subscribers{{batch="no"}} 1
fyrehose_subscribers{{batch="yes"}} 2
fyrehose_multicast_subscribers 1
fyrehose_journaling_clients 1
fyrehose_clients 5
fyrehose_last_sequence {pushes}
"""
PAIR = SINGLE + """fyrehose_pair_role_primary {primary}
fyrehose_pair_epoch 3
fyrehose_pair_standby_attached {attached}
fyrehose_pair_replication_lag_messages {lag}
fyrehose_pair_replication_lag_seconds 0.02
fyrehose_pair_takeovers_total 1
fyrehose_pair_fenced_total 0
fyrehose_pair_gone_total 0
fyrehose_pair_replicated_total 0
"""
JOURNAL_TEXT = """fyrehose_journal_head 900
fyrehose_journal_lag_messages {lag}
fyrehose_journal_lag_seconds 0.5
fyrehose_journal_written_total {written}
fyrehose_journal_lost_total 0
fyrehose_journal_forwarded_total 0
fyrehose_journal_fsync_seconds_max 0.004
"""
CACHE_TEXT = """fyrehose_cache_position {position}
fyrehose_cache_head 900
fyrehose_cache_lag_messages {lag}
fyrehose_cache_records 12
fyrehose_cache_updates_total {updates}
fyrehose_cache_snapshots_total 4
"""
GATEWAY_TEXT = """fyrehose_gateway_up{{kind="http"}} {up}
fyrehose_gateway_position{{kind="http"}} 880
fyrehose_gateway_published_total{{kind="http"}} {published}
fyrehose_gateway_refused_connections_total{{kind="http"}} {refused}
"""


def reading(endpoint: str, at: float, text: str) -> Reading:
    return Reading(endpoint, at, parse(text))


def section(screen, title):
    found, = [s for s in screen.sections if s.title == title]
    return {row.endpoint: dict(zip(found.columns, row.cells, strict=True)) for row in found.rows}


def test_each_process_is_known_by_what_it_exports():
    assert kind_of(parse(SINGLE.format(pushes=1, delivered=1, dropped=0))) == BACKBONE
    assert kind_of(parse(JOURNAL_TEXT.format(lag=0, written=0))) == JOURNAL
    assert kind_of(parse(GATEWAY_TEXT.format(up=1, published=0, refused=0))) == GATEWAY
    assert kind_of(parse(CACHE_TEXT.format(position=1, lag=0, updates=0))) == CACHE
    assert kind_of(parse("node_load1 0.5\n")) == UNKNOWN


def test_rates_are_the_growth_between_two_readings_and_the_first_screen_has_none():
    first = [reading("b:1", 10.0, SINGLE.format(pushes=1000, delivered=3000, dropped=0)),
             reading("j:1", 10.0, JOURNAL_TEXT.format(lag=5, written=995))]
    second = [reading("b:1", 12.0, SINGLE.format(pushes=21000, delivered=63000, dropped=10)),
              reading("j:1", 12.0, JOURNAL_TEXT.format(lag=0, written=21000))]
    alone = build({}, first)
    assert section(alone, "backbones")["b:1"]["IN/s"] == "-"
    assert "in - msgs/s" in alone.summary
    screen = build({r.endpoint: r for r in first}, second)
    backbone = section(screen, "backbones")["b:1"]
    assert backbone["IN/s"] == "10,000" and backbone["OUT/s"] == "30,000"
    assert backbone["ROLE"] == "single" and backbone["SUBS"] == "4" and backbone["CLIENTS"] == "5"
    assert backbone["SEQ"] == "21,000" and backbone["JOURNALING"] == "1"
    recovery = section(screen, "losses and recovery")["b:1"]
    assert recovery == {"ENDPOINT": "b:1", "DROPS/s": "5", "REQUESTS/s": "0", "FORWARDS/s": "0", "REDELIV/s": "0",
                        "GONE/s": "0", "RESTARTS": "-"}
    assert section(alone, "losses and recovery")["b:1"]["DROPS/s"] == "-"
    journal = section(screen, "journals")["j:1"]
    assert journal["WRITTEN/s"] == "10,002" and journal["LAG MSGS"] == "0" and journal["FSYNC MAX"] == "0.00s"
    assert "in 10,000 msgs/s" in screen.summary and "out 30,000 msgs/s" in screen.summary
    assert "pair" not in [s.title for s in screen.sections]


def test_a_counter_that_went_down_was_restarted_and_counts_from_zero():
    before = {"b:1": reading("b:1", 0.0, SINGLE.format(pushes=50000, delivered=0, dropped=0))}
    after = [reading("b:1", 1.0, SINGLE.format(pushes=300, delivered=0, dropped=0))]
    assert section(build(before, after), "backbones")["b:1"]["IN/s"] == "300"


def test_the_pair_shows_roles_epoch_the_standby_and_only_the_primary_counts_in_the_totals():
    at = {"a:1": reading("a:1", 0.0, PAIR.format(pushes=0, delivered=0, dropped=0, primary=1, attached=0, lag=7)),
          "b:1": reading("b:1", 0.0, PAIR.format(pushes=0, delivered=0, dropped=0, primary=0, attached=0, lag=0))}
    now = [reading("a:1", 1.0, PAIR.format(pushes=100, delivered=300, dropped=0, primary=1, attached=0, lag=7)),
           reading("b:1", 1.0, PAIR.format(pushes=100, delivered=300, dropped=0, primary=0, attached=0, lag=0))]
    screen = build(at, now)
    pair = section(screen, "standby pair")
    assert pair["a:1"]["ROLE"] == "primary" and pair["a:1"]["STANDBY"] == "DETACHED" and pair["a:1"]["EPOCH"] == "3"
    assert pair["a:1"]["LAG MSGS"] == "7" and pair["a:1"]["LAG"] == "0.02s"
    assert pair["b:1"]["ROLE"] == "standby" and pair["b:1"]["STANDBY"] == "-"
    assert "in 100 msgs/s" in screen.summary


def test_gateways_show_their_kind_link_and_refusals_and_unread_endpoints_say_why():
    before = {"g:1": reading("g:1", 0.0, GATEWAY_TEXT.format(up=1, published=0, refused=0))}
    now = [reading("g:1", 0.5, GATEWAY_TEXT.format(up=0, published=50, refused=2)),
           Reading("x:1", 0.5, None, "[Errno 111] Connection refused"),
           reading("n:1", 0.5, "node_load1 0.5\n")]
    screen = build(before, now, "errors")
    gateway = section(screen, "gateways")["g:1"]
    assert gateway == {"ENDPOINT": "g:1", "KIND": "http", "BACKBONE": "DOWN", "CLIENTS": "-", "POSITION": "880",
                       "PUB/s": "100",
                       "CONN/s": "0", "REFUSED/s": "4", "LOST": "0"}
    unread = section(screen, "not read")
    assert unread["x:1"]["PROBLEM"] == "[Errno 111] Connection refused"
    assert unread["n:1"]["PROBLEM"] == "no fyrehose metrics here"
    assert screen.summary.startswith("3 endpoints, 2 not read")


def test_rows_sort_by_endpoint_or_highest_first_and_a_key_resorts_the_same_figures():
    texts = {"a:1": (100, 3), "b:1": (900, 0), "c:1": (500, 50)}
    before = {name: reading(name, 0.0, JOURNAL_TEXT.format(lag=0, written=0)) for name in texts}
    now = [reading(name, 1.0, JOURNAL_TEXT.format(lag=lag, written=written)) for name, (written, lag) in texts.items()]
    order = {key: [row.endpoint for row in build(before, now, key).sections[0].rows]
             for key in ("endpoint", "rate", "lag")}
    assert order == {"endpoint": ["a:1", "b:1", "c:1"], "rate": ["b:1", "c:1", "a:1"], "lag": ["c:1", "a:1", "b:1"]}
    screen = build(before, now, "endpoint")
    again = resort(screen, "rate")
    assert [row.endpoint for row in again.sections[0].rows] == ["b:1", "c:1", "a:1"] and again.sort == "rate"
    with pytest.raises(ValueError):
        sort_rows(screen.sections[0].rows, "colour")


@pytest.mark.parametrize("value, text", [(None, "-"), (0, "0"), (2.25, "2.2"), (7.0, "7"), (12.6, "13"),
                                         (1234567, "1,234,567"), (float("nan"), "nan")])
def test_numbers_read_as_a_person_reads_them(value, text):
    assert number(value) == text


@given(st.integers(0, 2**53), st.integers(0, 2**53), st.floats(0.001, 100))
def test_a_rate_is_never_negative_and_is_the_growth_over_the_time_between(before, after, elapsed):
    then = {"j:1": reading("j:1", 0.0, JOURNAL_TEXT.format(lag=0, written=before))}
    now = [reading("j:1", elapsed, JOURNAL_TEXT.format(lag=0, written=after))]
    row, = build(then, now).sections[0].rows
    grown = after - before if after >= before else after
    assert row.rate == pytest.approx(grown / elapsed) and row.rate >= 0


@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)), min_size=1, max_size=8),
       st.sampled_from(["endpoint", "rate", "lag", "errors"]))
def test_sorting_orders_every_row_once(figures, key):
    names = [f"h{index}:1" for index in range(len(figures))]
    then = {name: reading(name, 0.0, JOURNAL_TEXT.format(lag=0, written=0)) for name in names}
    now = [reading(name, 1.0, JOURNAL_TEXT.format(lag=lag, written=written))
           for name, (written, lag) in zip(names, figures)]
    rows = build(then, now, key).sections[0].rows
    assert sorted(row.endpoint for row in rows) == sorted(names)
    if key != "endpoint":
        assert [getattr(row, key) for row in rows] == sorted((getattr(row, key) for row in rows), reverse=True)


def test_a_cache_shows_its_position_lag_records_and_rates():
    before = {"c:1": reading("c:1", 0.0, CACHE_TEXT.format(position=800, lag=100, updates=1000))}
    now = [reading("c:1", 2.0, CACHE_TEXT.format(position=890, lag=10, updates=1200))]
    cache = section(build(before, now), "caches")["c:1"]
    assert cache == {"ENDPOINT": "c:1", "POSITION": "890", "LAG MSGS": "10", "RECORDS": "12", "UPDATES/s": "100",
                     "SNAPS/s": "0", "LOSSES": "0"}
