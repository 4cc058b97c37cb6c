"""Tables derived from the tidy rows of losses.csv (pandas): per member, per model, per pair.

With `train.repeats: R`, members are named `<model>@<r>`; the per-model summary aggregates them:
mean, standard deviation and a 95% t-interval across the R seeds. Which models cannot be told
apart comes from paired comparisons (statistics.py), never from overlapping intervals.
"""

from __future__ import annotations

import io
from itertools import combinations
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

from harness.config.metrics import column as metric_column, split_column
from harness.config.metrics import bounds as metric_bounds, higher_is_better
from harness.outputs.columns import is_finite
from harness.outputs.statistics import covers_training, indistinguishable, seed_interval
from harness.outputs.stuck import STUCK_SEEDS, stuck_cell
from harness.outputs.unusual_seeds import unusual_seeds
from harness.outputs.writers import COLUMNS

from harness.config.naming import model_of as base_model
from harness.errors import ConfigError
from harness.rundir import MemberStatus, atomic_write_text, read_csv

SERVE_COLUMNS = ("latency_ms", "latency_p90_ms", "serve_images_per_s", "serve_peak_mb", "model_mb")
FINAL_LOSS_WINDOW = 10  # final_train_loss is the mean of the last 10 steps: one batch is too noisy


# Whole numbers whose mean over a model's seeds is rounded to one (the others: rank is given, diverged_step
# is the earliest seed's, repeats a count).
ROUNDED_MEANS = ("params", "flops_per_example", "steps", "best_step", "selected_step")
INTEGER_COLUMNS = ("rank", *ROUNDED_MEANS, "diverged_step", "repeats")


def read_table(path: Path, needs: tuple[str, ...] = (), dtype: dict | None = None, growing: bool = False) -> pd.DataFrame:
    """A CSV table a run wrote, or a ConfigError naming the file when it is not one (damaged, not
    text, emptied, cut short, or without the columns harness writes into it): a command reading an
    earlier run's files says which file is wrong instead of failing inside pandas. `growing`: the
    table of a run still writing it, or stopped mid-write (killed): a half row at its end is the
    one in progress and is left out, as a resume leaves it out."""
    try:
        text = Path(path).read_bytes()
        cut = bool(text) and not text.endswith(b"\n")  # pandas reads a half row as a whole one with gaps
        table = read_csv(io.BytesIO(text[: text.rfind(b"\n") + 1] if cut and growing else text), dtype=dtype)
    except (OSError, ValueError) as exc:  # pandas' parser errors and a file that is not text are ValueErrors
        raise ConfigError(f"{path} cannot be read as a table: {exc}") from None
    if cut and not growing:
        raise ConfigError(f"{path} ends in the middle of a row: it was cut short (a full disk, a copy that stopped)")
    missing = [c for c in needs if c not in table]
    if missing:
        raise ConfigError(f"{path} is not a table harness wrote: it lacks the column(s) {', '.join(missing)}")
    return table


def load_summary(path: Path) -> pd.DataFrame:
    """summary.csv with its integer columns as integers (nullable: a model that never diverged
    has no diverged_step), not the floats a CSV reader makes of a column with gaps."""
    if not path.exists():
        return pd.DataFrame()
    summary = read_table(path, needs=("model",))
    if summary.empty:
        raise ConfigError(f"{path} is not a summary harness wrote: it has no rows of models")
    for column in INTEGER_COLUMNS:
        if column in summary:
            summary[column] = pd.to_numeric(summary[column], errors="coerce").round().astype("Int64")
    # pandas' reader makes one block per column: a summary of 100 columns or more (repeats, classes'
    # own scores) made `compare` print pandas' PerformanceWarning at every column it added. A copy is one block per dtype.
    return summary.copy()


def load_losses(path: Path, growing: bool = False) -> pd.DataFrame:
    """losses.csv (`growing`: of a run not completed, see `read_table`)."""
    if not path.exists():
        return pd.DataFrame(columns=list(COLUMNS))
    return read_table(path, needs=COLUMNS, dtype={"model": str, "split": str, "metric": str}, growing=growing)


# ---------------------------------------------------------------------------------------------
# Per member


def build_member_summary(losses: pd.DataFrame, members: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """One row per trained member, in config order. `members` maps name -> facts the rows cannot
    tell: params, flops_per_example, status, diverged_step, ms_per_step, images_per_s."""
    records = []
    for name, facts in members.items():
        mine = losses[losses["model"] == name]
        train = mine[(mine["split"] == "train") & (mine["metric"] == "loss")].sort_values("step")
        val = mine[mine["split"] == "val"].pivot_table(index="step", columns="metric", values="value")
        record: dict[str, Any] = {
            "model": name,
            "params": facts.get("params"),
            "flops_per_example": facts.get("flops_per_example"),
            "status": facts.get("status", "ok"),
            "steps": int(train["step"].max()) if len(train) else 0,
            "final_train_loss": _tail_mean(train["value"]),
            "best_val_loss": float("nan"),
            "best_step": pd.NA,
            "ms_per_step": facts.get("ms_per_step"),
            "images_per_s": facts.get("images_per_s"),
            **{k: facts.get(k) for k in SERVE_COLUMNS},
            "diverged_step": facts.get("diverged_step"),
            "output_spread": facts.get("output_spread"),
        }
        if "loss" in val and val["loss"].notna().any():
            record["best_val_loss"] = float(val["loss"].min())
            record["best_step"] = int(val["loss"].idxmin())
        for metric in val.columns:
            if len(val):
                record[metric_column(metric)] = float(val[metric].iloc[-1])
        records.append(record)
    summary = pd.DataFrame.from_records(records)
    for column in ("best_step", "diverged_step"):
        summary[column] = summary[column].astype("Int64")
    return summary


def _tail_mean(values: pd.Series) -> float:
    finite = values[values.apply(is_finite)]
    return float(finite.tail(FINAL_LOSS_WINDOW).mean()) if len(finite) else float("nan")


# ---------------------------------------------------------------------------------------------
# Per model (aggregating repeats) and ranking


def build_summary(member_summary: pd.DataFrame, rank_by: str = "val_iou", intervals: pd.DataFrame | None = None, pair_stats: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per model, ranked by `rank_by` (best first). `intervals`: per model,
    `<metric>_low`/`_high` (uncertainty.py: image noise with one seed, seeds and images with
    repeats); `pair_stats`: which differences of the ranking metric are supported
    (statistics.py), from which `indistinguishable_from` follows."""
    frame = member_summary.copy()
    frame["model"] = frame["model"].map(base_model)
    repeated = frame.groupby("model", sort=False).size().max() > 1
    rows = [_model_row(model, group, member_summary, repeated, rank_by) for model, group in frame.groupby("model", sort=False)]
    summary = pd.DataFrame(rows)
    if intervals is not None and len(intervals):
        replaced = [c for c in intervals.columns if c != "model" and c in summary]
        summary = summary.drop(columns=replaced).merge(intervals, on="model", how="left")
    summary = _rank(summary, rank_by, pair_stats)
    for column in ROUNDED_MEANS:  # with repeats: the seeds' mean, rounded
        if column in summary:
            summary[column] = summary[column].round().astype("Int64")
    return summary


def _model_row(model: str, group: pd.DataFrame, member_summary: pd.DataFrame, repeated: bool, rank_by: str) -> dict[str, Any]:
    """A model's row from its seeds' rows (`group`, named by model): their means, with repeats
    each score's spread and interval over the seeds, and what the seeds say apart."""
    row: dict[str, Any] = {"model": model}
    row["status"] = model_status(group["status"].tolist())
    # A seed that failed (diverged) beside seeds that finished is left out of its model's
    # scores, as it is of their intervals and pairs (uncertainty.py): its scores are from
    # fewer steps. The status says how many; the verdict names them.
    done = group[group["status"].map(finished)]
    scored = scored_seeds(group)
    for column in group.columns:
        if column in ("model", "status"):
            continue
        score = split_column(column)[0] is not None or column.startswith(("final_", "best_val"))
        values = pd.to_numeric((scored if score else group)[column], errors="coerce")
        if column == "diverged_step":
            row[column] = values.min() if values.notna().any() else pd.NA
            continue
        mean = float(values.mean()) if values.notna().any() else float("nan")
        # A cost's mean over seeds (ms_per_step, images_per_s), to 12 significant digits: the
        # members' own figures are rounded, and their mean's binary noise (21.119999999999997)
        # is no measurement. Scores keep every digit (statistics and nightly read them back).
        row[column] = mean if score else float(f"{mean:.12g}")
        if repeated and score and len(done):
            # Over seeds alone; the validation metrics' intervals (seeds and images) replace these.
            # A model none of whose seeds finished has none: as it has no pair (its spread over
            # diverged seeds, often 0, would read as seeds that agree).
            interval = seed_interval(values.dropna(), bounds=metric_bounds(column))
            row[f"{column}_std"], row[f"{column}_low"], row[f"{column}_high"] = interval.seed_std, interval.low, interval.high
    row["repeats"] = len(group)
    if "output_spread" in member_summary:  # measured since harness 0.3.7
        row[STUCK_SEEDS] = stuck_cell(member_summary.loc[group.index])
    if repeated:
        row["unusual_seeds"] = _unusual(member_summary.loc[done.index], rank_by)
    return row


def _unusual(members: pd.DataFrame, rank_by: str) -> str | None:
    """A model's finished seeds far from its others on the ranking column (unusual_seeds.py),
    described (`unet@2 0.4410 (its others 0.5860-0.6560, p_holm 0.012)`), or None."""
    if rank_by not in members:
        return None
    found = unusual_seeds(members["model"].tolist(), pd.to_numeric(members[rank_by], errors="coerce"))
    return "; ".join(seed.describe() for seed in found) or None


# A model's status over its seeds names each way a seed ended, worst first (the first word is the
# worst): a model with one seed diverged and two stopped early is `diverged (1/3), stopped (2/3)`.
SEVERITY = (MemberStatus.OOM, MemberStatus.DIVERGED, MemberStatus.DROPPED, MemberStatus.STOPPED)
FINISHED = {str(s) for s in MemberStatus if s.finished}
FAILED = {str(s) for s in MemberStatus if s.failed}


def model_status(statuses: list[str]) -> str:
    """A model's status from its seeds': ok, or how they ended otherwise, each with how many of
    its seeds when there are several: `diverged (1/3)`, `diverged (1/3), stopped (2/3)`."""
    wrong = [s for s in statuses if s != "ok"]
    if not wrong:
        return "ok"
    if len(statuses) == 1:
        return wrong[0]
    known = [str(s) for s in SEVERITY]
    order = known + [s for s in dict.fromkeys(wrong) if s not in known]
    return ", ".join(f"{s} ({wrong.count(s)}/{len(statuses)})" for s in order if s in wrong)


def _ended(status) -> list[str]:
    """The ways a model's seeds ended, from its summary status: `diverged (1/3), ok` -> [diverged]."""
    return [part.strip().split(" ")[0] for part in str(status).split(",") if part.strip()]


def scored_seeds(group: pd.DataFrame) -> pd.DataFrame:
    """The rows of one model's seeds its scores are means over: those that finished, or all of
    them where none did (summary.csv, and the nightly's comparison over common repeats)."""
    done = group[group["status"].map(finished)] if "status" in group else group
    return done if len(done) else group


def finished(status) -> bool:
    """A summary status (`ok`, `stopped (3/3)`, `diverged (1/3)`, ...) says every seed of the model
    finished: trained to the end, or stopped early with its best weights kept (scores final)."""
    return all(word in FINISHED for word in _ended(status))


def none_finished(status) -> bool:
    """No seed of the model finished (`diverged`, `oom`, `diverged (3/3)`, `diverged (1/3), oom (2/3)`):
    its scores are all from fewer steps, and it is compared with nothing."""
    unfinished, total = 0, None
    for part in (p.strip() for p in str(status).split(",") if p.strip()):
        word, _, count = part.partition(" ")
        if word in FINISHED:
            return False
        if not count:  # one seed
            return True
        done, _, of = count.strip("()").partition("/")
        if not (done.isdigit() and of.isdigit()):
            return False  # not a status harness writes: ranked by its score
        unfinished, total = unfinished + int(done), int(of)
    return total is not None and unfinished >= total


def ranked_last(statuses: pd.Series) -> pd.Series:
    """Which summary statuses rank their model after every other: no seed finished, and not
    because a race dropped it (those rank by rung)."""
    return statuses.map(none_finished) & ~left_the_race(statuses)


def left_the_race(statuses: pd.Series) -> pd.Series:
    """Which summary statuses say a race dropped the model (its seeds go together)."""
    return statuses.astype(str).str.startswith(str(MemberStatus.DROPPED))


def failed(status) -> bool:
    """A summary status says a seed of the model failed: diverged, or did not fit its device."""
    return any(word in FAILED for word in _ended(status))


def _rank(summary: pd.DataFrame, rank_by: str, pair_stats: pd.DataFrame | None) -> pd.DataFrame:
    if rank_by not in summary or summary[rank_by].isna().all():
        summary.insert(0, "rank", pd.array([pd.NA] * len(summary), dtype="Int64"))
        return summary
    ascending = not higher_is_better(rank_by)
    # A race's outcome is its ranking: the models that finished first, then those dropped at later
    # rungs above those dropped earlier (their scores were measured sooner: not comparable). A model
    # none of whose seeds finished otherwise (diverged, out of memory) comes last, whatever its score.
    dropped = left_the_race(summary["status"]) if "status" in summary else pd.Series(False, index=summary.index)
    failed_all = ranked_last(summary["status"]) if "status" in summary else pd.Series(False, index=summary.index)
    left_at = summary["steps"].where(dropped, 0) if "steps" in summary else pd.Series(0, index=summary.index)
    order = summary.assign(_failed=failed_all, _dropped=dropped, _left=-pd.to_numeric(left_at).fillna(0))
    order = order.sort_values(["_failed", "_dropped", "_left", rank_by], ascending=[True, True, True, ascending], na_position="last", kind="stable")
    summary = order.drop(columns=["_failed", "_dropped", "_left"]).reset_index(drop=True)
    summary.insert(0, "rank", pd.array(range(1, len(summary) + 1), dtype="Int64"))
    # With one training seed no difference is measured against training randomness: nothing to list.
    if pair_stats is not None and len(pair_stats) and pair_stats["covers"].map(covers_training).any():
        summary["indistinguishable_from"] = indistinguishable(summary["model"].tolist(), pair_stats)
    return summary


# ---------------------------------------------------------------------------------------------
# Pairs: every model saw the same batches, so per-step losses can be compared pairwise


PAIR_COLUMNS = ["model_a", "model_b", "compared_on", "steps", "mean_loss_diff", "std_loss_diff", "a_beats_b"]


def common_loss_rows(losses: pd.DataFrame, members: set[str] | None = None) -> pd.DataFrame:
    """Each member's training loss on the common loss: its `compare_loss` rows where it trains on
    another loss (computed in the step from its predictions), else its own `loss` rows. Only
    `members` (those on the common loss: not autoencoders, whose loss is a reconstruction's) when
    given; every member when no member predicts masks."""
    train = losses[losses["split"] == "train"]
    if members is not None:
        train = train[train["model"].isin(members)]
    has_compare = set(train.loc[train["metric"] == "compare_loss", "model"])
    own = train[(train["metric"] == "loss") & ~train["model"].isin(has_compare)]
    return pd.concat([own, train[train["metric"] == "compare_loss"]])


def charted_val_metrics(losses: pd.DataFrame) -> list[str]:
    """The validation metrics drawn as curves: each one, but members' own `loss` when they were
    also scored on a common one (`compare_loss`): their own losses are not on one scale."""
    found = sorted(set(losses.loc[losses["split"] == "val", "metric"]))
    return [m for m in found if not (m == "loss" and "compare_loss" in found)]


def build_pairs(losses: pd.DataFrame, compared_on: str | None = None, metric_stats: pd.DataFrame | None = None, members: set[str] | None = None) -> pd.DataFrame:
    """Every pair on the same batches: the per-batch win rate on the common loss (`compared_on`),
    joined with the ranking metric's paired difference and interval (`metric_stats`). With one
    model there are no pairs: the table is empty but keeps its columns."""
    train = common_loss_rows(losses, members).copy()
    if train.empty:
        return pd.DataFrame(columns=PAIR_COLUMNS)
    train["model"] = train["model"].map(base_model)
    per_step = train.groupby(["step", "model"], sort=False)["value"].mean().unstack("model")
    models = list(dict.fromkeys(train["model"]))
    # Each pair in the orientation of its metric statistics (ordered by the score tables, which can
    # differ from the loss rows' order): a pair merged the other way round would lose its interval.
    oriented = set(zip(metric_stats["model_a"], metric_stats["model_b"])) if metric_stats is not None and len(metric_stats) else set()
    rows = []
    for a, b in combinations(models, 2):
        if (b, a) in oriented:
            a, b = b, a
        both = per_step[[a, b]].dropna()
        both = both[np.isfinite(both.to_numpy(dtype=float)).all(axis=1)]
        diff = both[a] - both[b]
        rows.append(
            {
                "model_a": a,
                "model_b": b,
                "compared_on": compared_on or "loss",
                "steps": len(both),
                "mean_loss_diff": float(diff.mean()) if len(diff) else float("nan"),
                "std_loss_diff": float(diff.std(ddof=1)) if len(diff) > 1 else float("nan"),
                # how often a's loss was lower than b's on the very same batch
                "a_beats_b": float((diff < 0).mean()) if len(diff) else float("nan"),
            }
        )
    pairs = pd.DataFrame(rows, columns=PAIR_COLUMNS)
    if metric_stats is not None and len(metric_stats):
        pairs = pairs.merge(metric_stats, on=["model_a", "model_b"], how="left")
    return pairs


SETTINGS = ("kind", "arch", "backbone", "loss", "optimizer", "learning_rate")


def grid_columns(specs) -> list[str]:
    """The columns `with_settings` appends after SETTINGS: one per grid key, in first-seen order."""
    return [k for k in dict.fromkeys(k for s in specs for k in s.grid_values) if k not in SETTINGS]


def with_settings(table: pd.DataFrame, specs) -> pd.DataFrame:
    """The table with each model's settings appended (what a user pivots on, as Ray Tune's
    dataframes and MLflow's params carry them), from the resolved specs, matched by name; then
    one column per grid key (`optimizer.learning_rate`), named as the config names it."""
    grid_keys = grid_columns(specs)
    settings = pd.DataFrame(
        [
            {"model": s.name, "kind": s.kind, "arch": s.arch, "backbone": s.backbone or "", "loss": s.loss,
             "optimizer": s.optimizer.name, "learning_rate": s.optimizer.learning_rate,
             **{k: s.grid_values.get(k) for k in grid_keys}}
            for s in specs
        ],
        columns=["model", *SETTINGS, *grid_keys],
    )
    return table.merge(settings, on="model", how="left") if len(table) else table


def save_table(table: pd.DataFrame, path: Path) -> None:
    atomic_write_text(path, table.to_csv(index=False))
