"""The one terminal table printer: `summary`, `runs`, `history` and `compare` all print through it.

Columns are given most important first. Required columns (the ranking score) are always shown and
may wrap. Identifier columns (a run's `name/run_id`, a model's name,
a night) are what a user copies into the next command, so they are never dropped and never cut:
other columns are left out, last first, until the rest fits the terminal, and if the identifiers
alone are wider than the terminal the table is printed wider (the terminal wraps the line; no
character is lost). Piped output gets the same table at rich's default width (80 columns).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import pandas as pd

from harness.config.metrics import label
from harness.outputs.columns import format_column, plain_text

TEXT_COLUMNS = frozenset({"run", "model", "status", "night", "run_id", "commit", "harness", "started", "best", "lead supported", "compare_group"})
BORDER = 3  # rich's separator and padding per column
EDGE = 1  # the table's outer border: rich draws n columns in their widths + 3n + 1


@dataclass
class TerminalTable:
    frame: pd.DataFrame
    priority: list[str]  # column keys, most important first (keys not in frame are skipped)
    identifiers: tuple[str, ...] = ("run", "model")
    required: tuple[str, ...] = ()  # always shown too, but may wrap onto a second line (a ranking score)
    headers: dict[str, str] = field(default_factory=dict)  # key -> header; the vocabulary's label otherwise
    texts: dict[str, list[str]] = field(default_factory=dict)  # key -> cells already written
    style: Callable[[str, int], str | None] = lambda column, row: None  # rich style of one cell
    _written: dict[str, list[str]] = field(default_factory=dict, repr=False)  # each column's cells, written once

    def columns(self) -> list[str]:
        ordered = [c for c in self.priority if c in self.frame.columns or c in self.texts]
        return list(dict.fromkeys(ordered))

    def header(self, column: str) -> str:
        return self.headers.get(column) or label(column)

    def header_width(self, column: str) -> int:
        """A header may take two lines ("unet\nval_iou"): its widest line counts."""
        return max(len(line) for line in self.header(column).split("\n"))

    def cells(self, column: str) -> list[str]:
        if column not in self._written:
            given = self.texts.get(column)
            values = given if given is not None else [format_column(column, v) for v in self.frame[column]]
            self._written[column] = [plain_text(t) for t in values]
        return self._written[column]

    def width_of(self, column: str) -> int:
        return max([self.header_width(column), *(len(t) for t in self.cells(column))]) + BORDER

    def fitting(self, width: int) -> list[str]:
        """The columns shown at `width`: every identifier, then each other column, in priority
        order, that still fits whole."""
        columns = self.columns()
        always = set(self.identifiers) | set(self.required)
        used = EDGE + sum(self.width_of(c) for c in columns if c in always)
        shown = []
        for column in columns:
            if column in always:
                shown.append(column)
                continue
            need = self.width_of(column)
            if used + need <= width:
                shown.append(column)
                used += need
        return shown


def print_table(table: TerminalTable, title: str | Callable[[int, int], str], console=None) -> list[str]:
    """Print `table` to the console (stdout by default); returns the columns shown. `title` may be
    a function of (shown, all) column counts."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = console or Console()
    shown = table.fitting(console.width)
    needed = EDGE + sum(table.width_of(c) if c in table.identifiers else table.header_width(c) + BORDER for c in shown)
    if needed > console.width:  # identifiers alone are wider than the terminal: never cut them
        console = Console(width=needed, file=console.file, force_terminal=console.is_terminal, no_color=console.no_color)
    caption = title(len(shown), len(table.columns())) if callable(title) else title
    view = Table()
    for column in shown:
        text = column in TEXT_COLUMNS or column in table.identifiers
        view.add_column(escape(table.header(column)), justify="left" if text else "right", no_wrap=column not in table.required,
                        min_width=table.width_of(column) - BORDER if column in table.identifiers else None)
    cells = {c: table.cells(c) for c in shown}
    for row in range(len(table.frame)):
        line = []
        for column in shown:
            text = escape(cells[column][row])
            style = table.style(column, row)
            line.append(f"[{style}]{text}[/]" if style else text)
        view.add_row(*line)
    console.print(escape(caption), style="italic", highlight=False)  # above the table, never squeezed to its width
    console.print(view)
    return shown
