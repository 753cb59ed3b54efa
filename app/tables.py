"""Tables for the terminal, in the conventions of data tools: ``--format table|csv|json``.

``table`` fits the terminal: time and number columns never wrap nor shrink; name columns (kernel,
job) get the room that is left and are shortened in the middle by ``cudawatch.text.shorten_name``
(head, tail and the id), so a row stays one line. ``csv`` and ``json`` print every value whole.
"""

from __future__ import annotations

import csv
import json
import sys
from dataclasses import dataclass
from typing import Any, Sequence

FORMATS = ("table", "csv", "json")


@dataclass(frozen=True)
class Col:
    key: str
    header: str
    kind: str = "text"  # text | name (shortened to fit) | time | num (right-aligned, never cut)
    ident: str | None = None  # key of the id shown with a shortened name
    max_width: int | None = None  # a text or name column wider than this wraps (words) instead
    prefix: str | None = None  # key of a label shown before the name, never shortened ("per-launch time · ")
    optional: bool = False  # left out (and named under the table) when the names would get < 30 characters


def check_format(fmt: str) -> str:
    import typer

    if fmt not in FORMATS:
        raise typer.BadParameter(f"unknown format {fmt!r}; use table, csv or json", param_hint="--format")
    return fmt


def _cell(value: Any) -> str:
    from cudawatch.text import terminal

    return "" if value is None else terminal(value)


def print_rows(cols: Sequence[Col], rows: Sequence[dict], fmt: str = "table", *, title: str | None = None,
               width: int | None = None, raw: Sequence[dict] | None = None) -> None:
    """Print ``rows`` (display strings per ``Col.key``) as a table, or ``raw`` (default: ``rows``)
    as CSV or JSON."""
    check_format(fmt)
    if fmt == "json":
        print(json.dumps(list(raw if raw is not None else rows), indent=2, default=str))
        return
    if fmt == "csv":
        data = list(raw if raw is not None else rows)
        keys = list(data[0].keys()) if data else [c.key for c in cols]
        writer = csv.DictWriter(sys.stdout, fieldnames=keys, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerows(data)
        return
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from cudawatch.text import NAME_LIMIT, shorten_name

    console = Console(width=width) if width else Console()
    cols, dropped = _fit(cols, rows, console.width)
    cells = [[_cell(_joined(c, r)) for c in cols] for r in rows]
    natural = [max([len(c.header)] + [len(row[i]) for row in cells]) for i, c in enumerate(cols)]
    capped = [min(w, c.max_width) if c.max_width else w for w, c in zip(natural, cols)]
    free = [i for i, c in enumerate(cols) if c.kind == "name" and not c.max_width]
    if free:
        # the free name columns share what is left; a name longer than one line of it (two lines on
        # a narrow terminal) loses its middle
        room = (console.width - sum(w for i, w in enumerate(capped) if i not in free) - 3 * len(cols)) // len(free)
        cell = room if room >= 40 else 2 * room
        for i in free:
            for row, r in zip(cells, rows):
                ident = r.get(cols[i].ident) if cols[i].ident else None
                head = f"{r[cols[i].prefix]} · " if cols[i].prefix and r.get(cols[i].prefix) else ""
                limit = max(24, min(NAME_LIMIT, cell - len(head)))  # the one rule's limit when there is room
                name = _cell(r.get(cols[i].key))
                if len(name) > limit:
                    row[i] = head + shorten_name(r.get(cols[i].key), ident, limit=limit)
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for c in cols:
        # time and numbers never wrap nor shrink; names and words wrap
        table.add_column(c.header, justify="right" if c.kind == "num" else "left", no_wrap=c.kind in ("time", "num"),
                         max_width=c.max_width, overflow="fold")
    for row in cells:
        table.add_row(*(Text(v) for v in row))
    if dropped:
        table.caption = f"({', '.join(dropped)}: widen the terminal or use --format csv|json)"
    console.print(table)


def _joined(c: Col, r: dict) -> Any:
    if c.prefix and r.get(c.prefix):
        return f"{r[c.prefix]} · {'' if r.get(c.key) is None else r[c.key]}"
    return r.get(c.key)


def _fit(cols: Sequence[Col], rows: Sequence[dict], width: int) -> tuple[list[Col], list[str]]:
    """The columns that leave the free name columns >= 30 characters (optional ones dropped, last first)."""
    cols, dropped = list(cols), []

    def room() -> int:
        fixed = sum(min(max([len(c.header)] + [len(_cell(_joined(c, r))) for r in rows]), c.max_width or 10**6)
                    for c in cols if not (c.kind == "name" and not c.max_width))
        return width - fixed - 3 * len(cols)

    while room() < 30 and any(c.optional for c in cols):
        victim = [c for c in cols if c.optional][-1]
        cols.remove(victim)
        dropped.append(victim.header)
    return cols, dropped


def spinner(message: str):
    """A rich spinner on stderr while a step runs (shown on a terminal only; a pipe sees nothing)."""
    from rich.console import Console

    return Console(stderr=True).status(message)
