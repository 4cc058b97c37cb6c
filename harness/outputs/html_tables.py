"""The report's tables: which summary columns a reader needs first, each model's settings (only what
differs, the shared ones once), and HTML tables that sort and line their numbers up.

Pure functions of DataFrames and the config's dictionary; report.py assembles the page.
"""

from __future__ import annotations

import html
from typing import Any

import pandas as pd

from harness.config.data_spec import READ_ONLY_BY
from harness.config.grid import GRID_VALUES
from harness.config.metrics import WATCHABLE, higher_is_better, on_split
from harness.config.recipes import not_read_by
from harness.config.schema import OPTIMIZER_READS
from harness.outputs.columns import flat_settings, format_column, is_finite
from harness.outputs.tables import SETTINGS

COSTS = ("params", "flops_per_example", "ms_per_step", "latency_ms", "serve_images_per_s", "model_mb")
HEADERS = {"flops_per_example": "FLOPs", "ms_per_step": "ms/step", "params": "params", "interval": "95% interval",
           "latency_ms": "latency ms (batch 1)", "serve_images_per_s": "serve images/s", "model_mb": "file MB"}


def summary_tables(summary: pd.DataFrame, rank_by: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the columns a reader needs, in reading order; every other column). The ranking metric
    comes right after the model, with its 95% interval beside it."""
    frame = summary.copy()
    low, high = f"{rank_by}_low", f"{rank_by}_high"
    if low in frame and high in frame and frame[low].notna().any():
        frame["interval"] = [_interval(a, b) for a, b in zip(frame[low], frame[high])]
    varying = _varying_settings(frame)
    tested = [c for c in (*(on_split(m, "test") for m in WATCHABLE), on_split(rank_by, "selected_val")) if c in frame]
    main = ["rank", "model", rank_by, "interval", *[m for m in (*tested, *WATCHABLE) if m != rank_by], *varying, *COSTS, "status"]
    main = list(dict.fromkeys(c for c in main if c in frame))
    rest = ["model", *[c for c in summary.columns if c not in main]]
    return frame[main], summary[rest]


def _varying_settings(frame: pd.DataFrame) -> list[str]:
    """Grid keys, then the settings, that differ between models; a setting repeating a grid key's
    values (learning_rate beside optimizer.learning_rate) once."""
    grid = [c for c in frame.columns if "." in c]
    candidates = grid + [c for c in SETTINGS if c in frame and c not in grid]
    chosen: list[str] = []
    for column in candidates:
        values = frame[column].astype(str).tolist()
        if len(set(values)) > 1 and all(frame[c].astype(str).tolist() != values for c in chosen):
            chosen.append(column)
    return chosen


def _interval(low: Any, high: Any) -> str:
    return f"[{low:.4f}, {high:.4f}]" if is_finite(low) and is_finite(high) else "-"


def settings_tables(config: dict[str, Any]) -> tuple[pd.DataFrame, dict[str, Any]]:
    """(one row per model with the settings that differ between models; the settings every model
    shares, with the run's train and data settings). Unset (null) settings are left out."""
    models = [_read_settings(m) for m in config.get("models", [])]
    keys = list(dict.fromkeys(k for m in models for k in m))
    differing = [k for k in keys if k != "name" and len({repr(m.get(k)) for m in models}) > 1]
    shared = {k: models[0][k] for k in keys if k != "name" and k not in differing and models[0].get(k) is not None}
    data = config.get("data") or {}
    unread = {f"data.{k}" for k in not_read_by(data.get("source", "synthetic"), READ_ONLY_BY)}
    for section in ("train", "data"):
        shared.update({f"{section}.{k}": v for k, v in flat_settings(config.get(section) or {}).items()
                       if v is not None and not k.startswith("optimizer") and f"{section}.{k}" not in unread})
    frame = pd.DataFrame([{"model": m.get("name"), **{k: m.get(k) for k in differing}} for m in models])
    return frame, shared


def _read_settings(model: dict[str, Any]) -> dict[str, Any]:
    """A model entry's settings as dotted names, less those its optimizers do not read (Adam's
    momentum, SGD's beta_1): listed, they would read as settings of the run."""
    optimizers = {"optimizer": model.get("optimizer"), "gan.discriminator_optimizer": (model.get("gan") or {}).get("discriminator_optimizer")}
    unread = {f"{key}.{name}" for key, optimizer in optimizers.items() if isinstance(optimizer, dict)
              for name in not_read_by(optimizer.get("name", "adam"), OPTIMIZER_READS)}
    # grid_values repeats what the grid set, under the setting's own name: listed once.
    return {k: v for k, v in flat_settings(model).items() if k not in unread and not k.startswith(f"{GRID_VALUES}.")}


def html_table(frame: pd.DataFrame, highlight: str | None = None, sortable: bool = True, css: str = "") -> str:
    """A table whose numbers are formatted per column and right-aligned; with `sortable`, a click on
    a header sorts by it (each cell carries its raw value in data-sort). The row ranked first is
    highlighted in the model and `highlight` columns."""
    best_row = _best_row(frame, highlight)
    head = "".join(f"<th title='{html.escape(str(c))}'>{html.escape(HEADERS.get(str(c), str(c)))}</th>" for c in frame.columns)
    rows = []
    for index, row in frame.iterrows():
        cells = []
        for column, value in row.items():
            classes = ["num"] if is_finite(value) else []
            if index == best_row and column in ("model", highlight):
                classes.append("best")
            attrs = f" class='{' '.join(classes)}'" if classes else ""
            if is_finite(value):
                attrs += f" data-sort='{float(value)!r}'"
            cells.append(f"<td{attrs}>{html.escape(format_column(str(column), value))}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    classes = " ".join(c for c in ("sortable" if sortable else "", css) if c)
    return f"<div class='scroll'><table class='{classes}'><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"


def _best_row(frame: pd.DataFrame, highlight: str | None):
    if not highlight:
        return None
    if "rank" in frame and (frame["rank"] == 1).any():
        return frame.index[frame["rank"] == 1][0]  # the ranking decides (a race ranks its finishers first)
    if highlight in frame and frame[highlight].notna().any():
        values = frame[highlight].astype(float)
        return values.idxmax() if higher_is_better(highlight) else values.idxmin()
    return None


def definition_list(items: dict[str, Any]) -> str:
    """Shared settings, once: `key: value` in columns."""
    cells = "".join(f"<div><code>{html.escape(k)}</code>: {html.escape(_plain(v))}</div>" for k, v in items.items())
    return f"<div class='shared'>{cells}</div>"


def _plain(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_plain(v) for v in value) + "]"
    return format_column("", value) if isinstance(value, float) else str(value)
