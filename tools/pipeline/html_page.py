"""A self-contained HTML report: headings, key/value facts, tables and the PNG charts beside it.

Every value is escaped; charts are referenced by file name, so the report and
its PNGs travel together as one folder.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 72em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f3f3f3; }
td.text, th.text { text-align: left; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0; }
p.note { color: #555; }
"""


def _cell(value: object) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".") if abs(value) < 1e15 else f"{value:.4g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


@dataclass
class HtmlPage:
    title: str
    parts: list[str] = field(default_factory=list)

    def heading(self, text: str) -> None:
        self.parts.append(f"<h2>{escape(text)}</h2>")

    def note(self, text: str) -> None:
        self.parts.append(f'<p class="note">{escape(text)}</p>')

    def facts(self, facts: dict[str, object]) -> None:
        rows = "".join(f'<tr><th class="text">{escape(key)}</th><td>{escape(_cell(value))}</td></tr>'
                       for key, value in facts.items())
        self.parts.append(f"<table>{rows}</table>")

    def table(self, headers: Sequence[str], rows: Sequence[Sequence[object]], *, text_columns: Sequence[int] = (0,)) -> None:
        def cls(index: int) -> str:
            return ' class="text"' if index in text_columns else ""

        head = "".join(f"<th{cls(i)}>{escape(h)}</th>" for i, h in enumerate(headers))
        body = "".join("<tr>" + "".join(f"<td{cls(i)}>{escape(_cell(v))}</td>" for i, v in enumerate(row)) + "</tr>"
                       for row in rows)
        self.parts.append(f"<table><tr>{head}</tr>{body}</table>")

    def image(self, path: Path, alt: str) -> None:
        self.parts.append(f'<img src="{escape(path.name)}" alt="{escape(alt)}">')

    def write(self, path: Path) -> Path:
        path.write_text(
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(self.title)}</title><style>{_STYLE}</style></head>"
            f"<body><h1>{escape(self.title)}</h1>\n" + "\n".join(self.parts) + "\n</body></html>\n",
            encoding="utf-8",
        )
        return path
