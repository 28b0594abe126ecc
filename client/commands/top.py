"""``fyrehose top``: the deployment now, read from its metrics endpoints and redrawn every second.

The figures come from :mod:`fyrehose.tools.watch.screen` (pure); this module
reads the endpoints, draws the screen with rich (over SSH as on a console:
rich speaks whatever the terminal declares) and reads one-key commands.
``--once`` prints one screen as plain text for scripts.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING

from fyrehose.runtime.argtypes import non_negative_duration, positive_duration
from fyrehose.tools.watch.screen import SORT_KEYS

if TYPE_CHECKING:
    from rich.console import Group

    from fyrehose.tools.watch.scrape import Scraper
    from fyrehose.tools.watch.screen import Reading, Screen

KEYS = "s: sort by the next column · q: quit"
ONCE_WIDTH = 10_000
WORD_COLUMNS = frozenset({"ENDPOINT", "ROLE", "KIND", "PROBLEM"})


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("endpoints", nargs="*", metavar="ENDPOINT",
                        help="a metrics endpoint: HOST:PORT (its /metrics) or http://HOST:PORT/PATH; the backbone's "
                             "or each pair member's --metrics, a journal's --metrics, an HTTP gateway's --listen")
    parser.add_argument("--config", type=Path, metavar="FILE",
                        help="read endpoints from FILE too, one per line (# starts a comment)")
    parser.add_argument("--once", action="store_true",
                        help="print one screen as plain text and exit (rates over one --interval)")
    parser.add_argument("--interval", type=non_negative_duration, default=1.0, metavar="S",
                        help="seconds between readings (default 1; with --once, 0 prints no rates)")
    parser.add_argument("--sort", choices=SORT_KEYS, default="endpoint",
                        help="order of the rows: by endpoint (default), or highest rate, lag or errors first")
    parser.add_argument("--timeout", type=positive_duration, default=0.5, metavar="S",
                        help="how long one endpoint may take to answer (default 0.5)")


def _endpoints(args: argparse.Namespace) -> list[str]:
    from fyrehose.errors import InputError
    from fyrehose.tools.watch.endpoints import combine, endpoint_url, parse_config

    listed = []
    if args.config is not None:
        try:
            text = args.config.read_text()
        except UnicodeDecodeError:
            raise InputError(f"{args.config}: not a text file") from None
        listed = parse_config(text, str(args.config))
    return combine([endpoint_url(text) for text in args.endpoints], listed)


def render(screen: Screen, took: float, keys: str = "") -> Group:
    """The screen as rich renderables: a header line, then one table per section."""
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    parts: list[Text | Table] = [Text(f"fyrehose top · {time.strftime('%H:%M:%S')} · {screen.summary} · "
                                      f"sorted by {screen.sort} · read in {took * 1000:.0f} ms")]
    for section in screen.sections:
        table = Table(title=section.title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                      show_edge=False, collapse_padding=True)
        for index, column in enumerate(section.columns):
            # words left, figures right; a narrow terminal shortens the figures' columns, never the words'
            words = column in WORD_COLUMNS
            widest = max([len(column), *(len(row.cells[index]) for row in section.rows)]) if words else None
            table.add_column(column, justify="left" if words else "right", no_wrap=True, min_width=widest)
        for row in section.rows:
            table.add_row(*row.cells)
        parts.extend((Text(""), table))
    if keys:
        parts.append(Text(keys, style="dim"))
    return Group(*parts)


def _refresh(scraper: Scraper, previous: dict[str, Reading], sort: str) -> tuple[Screen, float, dict[str, Reading]]:
    from fyrehose.tools.watch.screen import build

    started = time.monotonic()
    readings = scraper.read()
    screen = build(previous, readings, sort)
    # an endpoint that missed this reading keeps its last one: its next rate spans both intervals
    latest = previous | {reading.endpoint: reading for reading in readings if reading.scrape is not None}
    return screen, time.monotonic() - started, latest


def _once(scraper: Scraper, args: argparse.Namespace) -> int:
    import io
    import sys

    from rich.console import Console

    previous: dict[str, Reading] = {}
    if args.interval:
        _, _, previous = _refresh(scraper, {}, args.sort)
        time.sleep(args.interval)
    screen, took, _ = _refresh(scraper, previous, args.sort)
    text = io.StringIO()
    # as wide as the rows are: a script reads whole lines, never cut to the terminal's width
    console = Console(file=text, width=ONCE_WIDTH, no_color=True, highlight=False, force_terminal=False, emoji=False)
    console.print(render(screen, took))
    sys.stdout.write("".join(line.rstrip() + "\n" for line in text.getvalue().splitlines()))
    return 0


def _live(scraper: Scraper, args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.live import Live

    from fyrehose.tools.watch.keys import Keyboard
    from fyrehose.tools.watch.screen import resort

    sort = args.sort
    previous: dict[str, Reading] = {}
    console = Console(highlight=False)
    with Keyboard() as keyboard, Live(console=console, screen=True, auto_refresh=False) as live:
        while True:
            screen, took, previous = _refresh(scraper, previous, sort)
            live.update(render(screen, took, KEYS), refresh=True)
            deadline = time.monotonic() + args.interval
            while (key := keyboard.key(max(0.0, deadline - time.monotonic()))) is not None:
                if key == "q":
                    return 0
                if key == "s":
                    sort = SORT_KEYS[(SORT_KEYS.index(sort) + 1) % len(SORT_KEYS)]
                    screen = resort(screen, sort)
                    live.update(render(screen, took, KEYS), refresh=True)


def run(args: argparse.Namespace) -> int:
    import sys

    from fyrehose.errors import InputError
    from fyrehose.tools.watch.scrape import Scraper

    if not args.once and not args.interval:
        raise InputError("--interval 0 is for --once only: the live view needs time between two readings")
    if not args.once and not sys.stdout.isatty():
        raise InputError("the live view needs a terminal: use --once to print one screen as text")
    endpoints = _endpoints(args)
    with Scraper(endpoints, args.timeout) as scraper:
        return _once(scraper, args) if args.once else _live(scraper, args)
