"""How a table cell is written for people: whether a value counts as a number, and its text for a
terminal, a plain print or Markdown. Which way a column is better, its label and its number format
are the metric vocabulary's (config/metrics.py)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from harness.config import metrics

def is_finite(value: Any) -> bool:
    """A real, finite number: not None, NaN, NA, +-Inf, nor a string."""
    if value is None or value is pd.NA or isinstance(value, (str, bytes, bool)):
        return False
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def chosen_rows(summary: pd.DataFrame) -> pd.DataFrame:
    """The rows of the model each group chose on validation (`chosen_in_group`, with
    output.compare_by): True as written, or "True" as a CSV gives it back beside gaps."""
    return summary[summary["chosen_in_group"].astype(str).str.lower() == "true"]


def is_missing(value: Any) -> bool:
    """None, NaN or NA: a cell with nothing in it (an infinite value is not missing: it is shown)."""
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def terminal_text(value: Any) -> str:
    """A cell for rich's console: formatted, with control characters (escape sequences) dropped and
    rich's markup escaped, so a model named `[/x]` or holding ESC prints as itself."""
    from rich.markup import escape

    return escape(plain_text(value))


def plain_text(value: Any) -> str:
    """A cell for a plain print: formatted, control characters (escape sequences) replaced by '?'."""
    return "".join(ch if ch.isprintable() else "?" for ch in format_cell(value))


def markdown_text(value: Any) -> str:
    """A cell for a Markdown table: formatted, with Markdown's and HTML's special characters escaped."""
    return "".join(f"\\{ch}" if ch in "\\`*_[]<>|#" else ch for ch in plain_text(value))


def format_cell(value: Any) -> str:
    """A table cell for people: 4 significant digits, '-' for missing (None, NaN, NA)."""
    if is_missing(value):
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def flat_settings(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested settings as dotted names (`optimizer.learning_rate`), unset ones (None, {}, []) left
    out: how the report's settings table and MLflow's params name them."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flat_settings(value, f"{name}."))
        elif value is not None and not (isinstance(value, (dict, list)) and not value):
            out[name] = value
    return out


def format_column(column: str, value: Any) -> str:
    """A cell formatted for its column (the vocabulary's format), so a column's numbers line up:
    scores and losses to 4 decimals, sizes as 15.0 k / 8.8 M, times to 0.1 ms."""
    if is_missing(value) or isinstance(value, str):
        return format_cell(value)
    spec = metrics.value_format(column)
    if spec == "count":
        return human_count(float(value))
    if spec is not None:
        return format(float(value), spec)
    if column.startswith(metrics.SPLIT_PREFIXES) or column.endswith("_loss"):  # intervals, per-class scores
        return f"{float(value):.4f}"
    return format_cell(value)


def human_count(value: float) -> str:
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.1f} {suffix}"
    return f"{value:.0f}"


def with_intervals(table: pd.DataFrame, column: str) -> list[str]:
    """Each row's `column` as shown in a ranking: its value, then its 95% interval (`interval_text`)."""
    return [format_column(column, v) + interval_text(table, i, column) for i, v in enumerate(table[column])]


def interval_text(table: pd.DataFrame, i: int, column: str) -> str:
    """` [low, high]` of row i's 95% interval of `column` (`<column>_low`/`_high`; ` ± half` from a
    table written with `_ci95`), formatted as the column is; "" where it has none."""
    low, high, ci = f"{column}_low", f"{column}_high", f"{column}_ci95"
    if low in table and not is_missing(table[low].iloc[i]):
        return f" [{format_column(column, table[low].iloc[i])}, {format_column(column, table[high].iloc[i])}]"
    if ci in table and not is_missing(table[ci].iloc[i]):
        return f" ± {format_column(column, table[ci].iloc[i])}"
    return ""
