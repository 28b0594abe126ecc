"""PNG charts drawn with matplotlib from small results already collected to the driver.

Figures are built with the object API (``matplotlib.figure.Figure``), never
pyplot, so no global state or GUI backend is involved and charts can be drawn
from any thread.  Every function takes plain values and writes one PNG.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
from matplotlib.figure import Figure

SIZE = (10, 4)
DPI = 100

Series = tuple[Sequence, Sequence]  # (x values, y values)


def _figure(title: str) -> tuple[Figure, Axes]:
    figure = Figure(figsize=SIZE, dpi=DPI, layout="constrained")
    axes = figure.add_subplot()
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    return figure, axes


def _time_axis(axes: Axes) -> None:
    locator = AutoDateLocator()
    axes.xaxis.set_major_locator(locator)
    axes.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    axes.set_xlabel("time (UTC)")


def _empty(axes: Axes, text: str) -> None:
    axes.text(0.5, 0.5, text, ha="center", va="center", transform=axes.transAxes, fontsize=14, color="gray")


def time_series(path: Path, title: str, ylabel: str, series: Mapping[str, Series], *,
                marks: Sequence[datetime] = (), stepped: bool = False) -> Path:
    """One line per named series over time; ``marks`` are drawn as vertical lines (phase boundaries)."""
    figure, axes = _figure(title)
    drawn = False
    for label, (xs, ys) in series.items():
        if len(xs):
            if stepped:
                axes.step(xs, ys, where="post", label=label)
            else:
                axes.plot(xs, ys, label=label, marker="." if len(xs) < 50 else None)
            drawn = True
    for mark in marks:
        axes.axvline(mark, color="gray", linestyle=":", linewidth=1)  # type: ignore[arg-type]  # matplotlib's stubs want floats; its date units take datetimes
    if drawn:
        _time_axis(axes)
        axes.legend(loc="best")
        low, high = axes.get_ylim()
        axes.set_ylim(min(low, 0), high)  # rates and latencies read wrongly on an axis that does not start at 0
    else:
        _empty(axes, "no data")
    axes.set_ylabel(ylabel)
    figure.savefig(path)
    return path


def timeline_bars(path: Path, title: str, ylabel: str, starts: Sequence[datetime], heights: Sequence[float],
                  width_seconds: float, *, span: tuple[datetime, datetime] | None = None,
                  empty_text: str = "none") -> Path:
    """Bars at window starts (one window wide) on a time axis covering ``span``: where in time something happened."""
    figure, axes = _figure(title)
    if len(starts):
        axes.bar(starts, heights, width=width_seconds / 86400, align="edge", color="tab:red")  # type: ignore[arg-type]  # matplotlib's stubs want floats; its date units take datetimes
        axes.set_ylim(bottom=0)
    else:
        _empty(axes, empty_text)
    if span is not None and span[0] < span[1]:
        axes.set_xlim(span)  # type: ignore[arg-type]  # matplotlib's stubs want floats; its date units take datetimes
        _time_axis(axes)
    axes.set_ylabel(ylabel)
    figure.savefig(path)
    return path


def category_bars(path: Path, title: str, ylabel: str, labels: Sequence[str],
                  series: Mapping[str, Sequence[float]]) -> Path:
    """Grouped bars, one group per label (size classes, load phases)."""
    figure, axes = _figure(title)
    if labels and series:
        width = 0.8 / len(series)
        for index, (name, values) in enumerate(series.items()):
            positions = [i + (index - (len(series) - 1) / 2) * width for i in range(len(labels))]
            axes.bar(positions, values, width=width, label=name)
        axes.set_xticks(range(len(labels)), labels, rotation=30 if len(labels) > 8 else 0, ha="right" if len(labels) > 8 else "center")
        if len(series) > 1:
            axes.legend(loc="best")
    else:
        _empty(axes, "no data")
    axes.set_ylabel(ylabel)
    figure.savefig(path)
    return path
