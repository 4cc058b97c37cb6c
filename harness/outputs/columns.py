"""What a table column means to people, in one place: which direction is better, whether a value
counts as a number, and how a cell is written. Tables, compare, the report, plots and the nightly
verdicts all ask here."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

HIGHER_IS_BETTER = frozenset({"val_iou", "val_f1", "images_per_s", "serve_images_per_s"})
LOWER_IS_BETTER = frozenset(
    {"val_loss", "best_val_loss", "final_train_loss", "params", "flops_per_example", "ms_per_step", "input_wait_share",
     "latency_ms", "latency_p90_ms", "serve_peak_mb", "model_mb"}
)


def higher_is_better(column: str) -> bool:
    """True for scores and throughput; False for losses, sizes and times (and unknown columns).
    A test-split or chosen-weights column goes the way its validation column does."""
    return _as_val(column) in HIGHER_IS_BETTER


def _as_val(column: str) -> str:
    for prefix in ("test_", "selected_val_"):
        if column.startswith(prefix):
            return "val_" + column.removeprefix(prefix)
    return column


def has_direction(column: str) -> bool:
    return _as_val(column) in HIGHER_IS_BETTER or _as_val(column) in LOWER_IS_BETTER


def is_finite(value: Any) -> bool:
    """A real, finite number: not None, NaN, NA, +-Inf, nor a string."""
    if value is None or value is pd.NA or isinstance(value, (str, bytes, bool)):
        return False
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


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


def fit_to_width(cells: dict[str, list[str]], headers: dict[str, str], width: int, keep: int = 3) -> list[str]:
    """The columns (given most important first) that fit a terminal `width` whole, never cut:
    the first `keep` always, then each that still fits. Rich's borders take 3 characters a column."""
    shown, used = [], 4
    for column, texts in cells.items():
        need = max([len(headers.get(column, column)), *(len(t) for t in texts)]) + 3
        if used + need > width and len(shown) >= keep:
            continue
        shown.append(column)
        used += need
    return shown


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
    """A cell formatted for its column, so a column's numbers line up: scores and losses to 4
    decimals, sizes as 15.0 k / 8.8 M, times to 0.1 ms."""
    if is_missing(value) or isinstance(value, str):
        return format_cell(value)
    if column in ("params", "flops_per_example"):
        return human_count(float(value))
    if column in ("ms_per_step", "images_per_s", "serve_images_per_s", "serve_peak_mb"):
        return f"{float(value):.1f}"
    if column in ("latency_ms", "latency_p90_ms", "model_mb"):
        return f"{float(value):.2f}"
    if column.startswith(("val_", "test_", "selected_val_", "best_val", "final_train")) or column.endswith("_loss"):
        return f"{float(value):.4f}"
    return format_cell(value)


def human_count(value: float) -> str:
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.1f} {suffix}"
    return f"{value:.0f}"
