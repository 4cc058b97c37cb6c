"""Tables derived from the tidy rows of losses.csv (pandas)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from .writers import COLUMNS

FINAL_LOSS_WINDOW = 10  # final_train_loss is the mean of the last 10 steps: one batch is too noisy


def load_losses(path: Path) -> pd.DataFrame:
    if not path.exists():
        return pd.DataFrame(columns=list(COLUMNS))
    return pd.read_csv(path, dtype={"model": str, "split": str, "metric": str})


def build_summary(losses: pd.DataFrame, models: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """One row per model, in config order.

    `models` maps name -> facts the rows cannot tell: params, status, diverged_step, ms_per_step.
    """
    records = []
    for name, facts in models.items():
        mine = losses[losses["model"] == name]
        train = mine[(mine["split"] == "train") & (mine["metric"] == "loss")].sort_values("step")
        val = mine[mine["split"] == "val"].pivot_table(index="step", columns="metric", values="value")
        record: dict[str, Any] = {
            "model": name,
            "params": facts.get("params"),
            "status": facts.get("status", "ok"),
            "steps": int(train["step"].max()) if len(train) else 0,
            "final_train_loss": _tail_mean(train["value"]),
            "best_val_loss": float("nan"),
            "best_step": pd.NA,
            "ms_per_step": facts.get("ms_per_step"),
            "diverged_step": facts.get("diverged_step"),
        }
        if "loss" in val and val["loss"].notna().any():
            best = val["loss"].idxmin()
            record["best_val_loss"] = float(val["loss"].min())
            record["best_step"] = int(best)
        for metric in val.columns:
            if len(val):
                record[f"val_{metric}"] = float(val[metric].iloc[-1])
        records.append(record)
    summary = pd.DataFrame.from_records(records)
    summary["best_step"] = summary["best_step"].astype("Int64")
    summary["diverged_step"] = summary["diverged_step"].astype("Int64")
    return summary


def _tail_mean(values: pd.Series) -> float:
    finite = values[values.apply(lambda v: pd.notna(v) and abs(v) != float("inf"))]
    return float(finite.tail(FINAL_LOSS_WINDOW).mean()) if len(finite) else float("nan")


def save_summary(summary: pd.DataFrame, path: Path) -> None:
    from .rundir import atomic_write_text

    atomic_write_text(path, summary.to_csv(index=False))
