"""The race (successive halving), as pure decisions from validation scores, tested with fakes.

At each rung (the end of an epoch named in `train.race.rungs`) the models still training are
ranked by the race's metric; with repeats a model is ranked by the mean over its seeds, and its
seeds are kept or dropped together. The best `ceil(keep x models)` are kept, and every model tied
with the last of them. The dropped members then leave the fused step (training/compiled.py).

Whether a rung's ranking can be trusted is measured at the end: Spearman's rank correlation
between each rung's ranking and the final ranking, over the models that finished.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from harness.config.metrics import higher_is_better, metric_of
from harness.config.naming import seeds_of_each_model
from harness.config.recipes import models_kept

MIN_MODELS_FOR_CORRELATION = 3  # with two, a rank correlation is +1 or -1 whatever the scores


def rank_models(values: dict[str, float], higher: bool) -> list[tuple[str, float, list[str]]]:
    """(model, mean score over its members, members), best first; a NaN score ranks last."""
    members = seeds_of_each_model(values)
    means = {model: _mean([values[m] for m in names]) for model, names in members.items()}

    def order(model: str) -> tuple:
        value = means[model]
        return (math.isnan(value), -value if higher else value, model)

    return [(model, means[model], members[model]) for model in sorted(means, key=order)]


def decide(values: dict[str, float], keep: float, higher: bool) -> tuple[list[dict[str, Any]], list[str]]:
    """One rung: (the ranking, each row {model, value, rank, kept}; the members dropped)."""
    ranked = rank_models(values, higher)
    n_keep = models_kept(keep, len(ranked))
    cut = ranked[n_keep - 1][1]
    ranking, dropped = [], []
    for rank, (model, value, members) in enumerate(ranked, start=1):
        kept = rank <= n_keep or value == cut  # ties with the last one kept are kept
        ranking.append({"model": model, "value": _plain(value), "rank": rank, "kept": kept})
        if not kept:
            dropped += members
    return ranking, dropped


def correlations(rungs: list[dict[str, Any]], final: dict[str, float], higher: bool) -> list[dict[str, Any]]:
    """Per rung: Spearman's rho between its scores and the final scores of the models that
    finished (None, with the reason, when fewer than three did)."""
    from scipy.stats import spearmanr

    final_by_model = {model: value for model, value, _ in rank_models(final, higher)}
    out = []
    for rung in rungs:
        pairs = [(row["value"], final_by_model[row["model"]]) for row in rung["ranking"]
                 if row["model"] in final_by_model and row["value"] is not None and not math.isnan(final_by_model[row["model"]])]
        entry = {"rung": rung["rung"], "epoch": rung["epoch"], "models_finished": len(pairs), "spearman": None}
        if len(pairs) >= MIN_MODELS_FOR_CORRELATION:
            rho = spearmanr([p[0] for p in pairs], [p[1] for p in pairs]).statistic
            entry["spearman"] = _plain(float(rho))
        else:
            entry["note"] = f"needs {MIN_MODELS_FOR_CORRELATION} finished models, {len(pairs)} finished"
        out.append(entry)
    return out


@dataclass
class Race:
    """The race of one run: when its rungs are, and what each decided (run.json `race.rungs`)."""

    metric: str  # "val_iou", ...
    keep: float
    epochs_at: dict[int, int]  # step -> epoch of each rung
    rungs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def higher_is_better(self) -> bool:
        return higher_is_better(self.metric)

    def due(self, step: int) -> bool:
        return step in self.epochs_at and all(r["step"] != step for r in self.rungs)

    def decide(self, step: int, values: dict[str, float]) -> dict[str, Any]:
        ranking, dropped = decide(values, self.keep, self.higher_is_better)
        rung = {"rung": len(self.rungs) + 1, "epoch": self.epochs_at[step], "step": step, "metric": self.metric,
                "ranking": ranking, "dropped": dropped, "members_after": len(values) - len(dropped)}
        self.rungs.append(rung)
        return rung

    def as_info(self) -> dict[str, Any]:
        return {"metric": self.metric, "keep": self.keep, "rung_epochs": sorted(self.epochs_at.values()), "rungs": self.rungs}


def make_race(spec, steps_per_epoch: int, total_steps: int, info: dict[str, Any], start: int) -> Race | None:
    """The run's race (None without `train.race`); a resumed run keeps the rungs decided at or
    before its restored step and decides the later ones again."""
    if spec is None:
        return None
    kept = [r for r in (info.get("race") or {}).get("rungs", []) if r["step"] <= start]
    return Race(spec.metric, spec.keep, dict(zip(spec.rung_steps(steps_per_epoch), spec.rungs)), kept)


def final_scores(losses: pd.DataFrame, metric: str, finished: list[str]) -> dict[str, float]:
    """Each finished member's last validation score on `metric` (val_iou -> rows of `iou`)."""
    name = metric_of(metric)
    rows = losses[(losses["split"] == "val") & (losses["metric"] == name) & losses["model"].isin(finished)]
    last = rows.sort_values("step").groupby("model")["value"].last()
    return {model: float(value) for model, value in last.items()}


def _mean(values: list[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return sum(finite) / len(finite) if len(finite) == len(values) else math.nan


def _plain(value: float) -> float | None:
    return None if math.isnan(value) else round(float(value), 6)
