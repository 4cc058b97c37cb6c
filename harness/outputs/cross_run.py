"""`harness compare RUN_DIR RUN_DIR ... --pairs`: verdicts between models of different runs.

A model trained last week and one trained tonight can be compared as strictly as two members of one
run, when both were scored on the same images: per image, from each run's val_scores.csv (or
test_scores.csv, when the column compared is a test one; by default the runs' ranking column,
`--metric` another), with the statistics of one run (`statistics.bootstrap_metric` with one
training seed, `statistics.across_seeds` with repeats), over the pairs whose models come from
different runs (Holm's adjustment runs over those alone).

Checked before anything is computed, in order, each refusal naming what differs (exit 2): every run
has finished (summary.csv); they rank by the same column (unless `--metric` names one); they have
one training seed each or repeats each (a one-seed model has no spread to weigh against another's);
their data settings that decide the scored images are equal (`data.*` but batch_size, augment,
bootstrap_train and cache; the paths of the files may differ, data moved to another machine, and
runs compared on validation may differ in their test split, if the next check can be made); and
the images scored were the same, image by image (each image's count of true pixels per class,
from the files: what a changed file, split or size would show). Runs made
with other library versions are compared, and a note says which versions differ; so is a column of
each model's own loss over models that trained on different losses. As in a run's own pairs, only
members that finished are compared (a diverged or dropped one has scores from fewer steps): a note
names the others, and a run none of whose models finished is refused.

`harness nightly` asks the same of tonight's run and an earlier one, for each watched metric,
each model against itself (`metric`, `same_model`: nights/paired.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd

from harness.config.metrics import OWN_LOSS_RANKINGS, column, metric_of, split_column
from harness.config.naming import model_of, repeat_of
from harness.config.data_spec import FILE_PATHS
from harness.config.schema import ExperimentConfig
from harness.errors import ConfigError, did_you_mean
from harness.outputs.columns import chosen_rows
from harness.outputs.statistics import across_seeds, bootstrap_metric, image_draws, mark_equivalence
from harness.outputs.tables import finished, load_summary
from harness.outputs.uncertainty import BOOTSTRAPPED, last_evaluations
from harness.rundir import RunDir, differing_versions, given_once, runs_held

# Data settings that change how the models trained, never which images they were scored on.
TRAINING_ONLY_DATA = ("batch_size", "augment", "bootstrap_train", "cache")
# Data settings that say where the files are, not what they hold.
WHERE_DATA = (*FILE_PATHS, "tfds.data_dir")
# Data settings of the test split. Runs compared on validation scores may differ in them (a test
# split added since) if their validation images check out one by one: synthetic data draw test
# images after the validation ones, while a folder's test_fraction moves files out of validation
# too, which the check finds.
TEST_SPLIT_DATA = ("test_size", "test_fraction", "test_images", "test_masks")
SEPARATOR = ": "  # between a run's label and a model's name in the pairs' model_a / model_b


@dataclass
class RunScores:
    """What one run contributes: its label, config and library versions, then (after the checks
    on its settings) per-member values of the ranking column (model, repeat, member, value) and
    per-image quantities on the ranking column's split."""

    run: RunDir
    config: ExperimentConfig
    versions: dict
    label: str = ""  # `<experiment>/<run_id>`, or the run's path where two runs share that
    members: pd.DataFrame | None = None
    scored: dict | None = None
    unfinished: list[str] | None = None  # members left out: `unet (diverged)`, `unet@2 (dropped)`


@dataclass(frozen=True)
class CrossRun:
    """The pairs across runs (`run_a, model_a, run_b, model_b`, then the columns of a run's own
    pairs.csv: `diff, diff_low, diff_high, covers, supported`, ...), the column compared and what
    a reader should know beside them."""

    pairs: pd.DataFrame
    rank: str
    notes: list[str]


def cross_run_pairs(run_dirs: list[Path], metric: str | None = None, same_model: bool = False, chosen: bool = False) -> CrossRun:
    """Every pair of models from different runs on `metric`, a summary column (default: the runs'
    ranking column, which must then be the same in every run); `same_model`: only each model
    against itself in the other runs (what `harness nightly` asks); `chosen`: only the model each
    group of a run chose on validation (`output.compare_by`). ConfigError (exit 2) when the runs
    cannot be compared pair by pair."""
    runs = [_open(Path(d)) for d in _distinct(run_dirs)]
    labels = [r.run.label for r in runs]
    for run in runs:  # runs copied from elsewhere may share experiment and run id
        run.label = run.run.label if labels.count(run.run.label) == 1 else str(run.run.path)
    rank = metric or _same_ranking(runs)
    _same_seeding(runs)
    split = split_column(rank)[0]
    moved, other_split = _same_data(runs, split)
    for run in runs:
        _read_scores(run, rank, chosen)
    _same_images(runs, split, moved + other_split)
    notes = [note for note in (_unfinished_note(runs), _seeds_note(runs), _same_networks_note(runs), _own_loss_note(runs, rank), _versions_note(runs))
             if note]
    if moved:
        notes.append("The data's files are elsewhere in some runs (" + "; ".join(moved) + "): the scored images were found the same "
                     "by their true masks, image by image.")
    if other_split:
        notes.append("The runs' test splits differ (" + "; ".join(other_split) + "): the validation images they are compared on were "
                     "found the same by their true masks, image by image.")
    return CrossRun(_labelled(_statistics(runs, rank, same_model)), rank, notes)


def _distinct(run_dirs: list[Path]) -> list[Path]:
    if len(run_dirs) < 2:
        raise ConfigError("compare --pairs compares models of different runs: give two run directories or more")
    given_once(run_dirs, "compare --pairs", "a run's own pairs are in its pairs.csv")
    return list(run_dirs)


def _open(run_dir: Path) -> RunScores:
    run = RunDir(run_dir)
    if not run.summary_csv.is_file():
        raise ConfigError(f"{run_dir}: no summary.csv (the run has not finished, or this is not a run directory{runs_held(run_dir)}); "
                          "pairs across runs need each model's final scores")
    record = run.read_record()
    if record.stopped_short:
        # its summary.csv is one `harness report` wrote when it stopped: its scores are not final
        raise ConfigError(f"{run_dir}: {record.status} at step {record.steps_done}/{record.total_steps} (its summary.csv is of "
                          f"then); pairs across runs need each model's final scores: harness resume {run_dir}, then compare again")
    return RunScores(run, run.read_config(), record.versions)


def _read_scores(scores: RunScores, rank: str, chosen: bool = False) -> None:
    """Each member's value of `rank`, of the members that finished (trained to the end or stopped
    early; as a run's own pairs: a diverged or dropped one has scores from fewer steps); `chosen`:
    of the models each group chose; and, for a validation or test metric, each member's per-image
    quantities on that split."""
    run, split = scores.run, split_column(rank)[0]
    path = run.test_scores_csv if split == "test" else run.val_scores_csv
    scores.scored = last_evaluations(path, scores.config.data.classes) if split in ("val", "test") else {}
    summary = load_summary(run.summary_csv)
    source = run.member_rows_csv(scores.config.train.repeats)
    table = load_summary(source) if scores.config.train.repeats > 1 else summary
    if "status" in table:
        done = table["status"].map(finished)
        scores.unfinished = [f"{m} ({s})" for m, s in zip(table.loc[~done, "model"], table.loc[~done, "status"])]
        table = table[done]
    if chosen:
        table = table[table["model"].map(model_of).isin(_chosen_models(summary, run.path))]
    if rank not in table:
        scores_there = [c for c in table.columns if split_column(c)[0] in ("val", "test") and not c.endswith(("_low", "_high", "_std"))]  # not the intervals
        raise ConfigError(f"{source}: {'missing' if table.empty else f'no {rank} column'}; the run's models cannot be compared on {rank}"
                          + (did_you_mean(rank, scores_there, listing="its score columns:") if scores_there else ""))
    scores.members = pd.DataFrame({"model": table["model"].map(model_of), "repeat": table["model"].map(repeat_of),
                                   "member": table["model"], "value": pd.to_numeric(table[rank], errors="coerce")}).dropna(subset=["value"])
    scores.scored = {m: s for m, s in scores.scored.items() if m in set(scores.members["member"])}
    if scores.members.empty and scores.unfinished:
        raise ConfigError(f"compare --pairs: no model of {scores.label} finished ({', '.join(scores.unfinished)}): it has no final "
                          "scores to compare")


def _chosen_models(summary: pd.DataFrame, run_path: Path) -> set[str]:
    if "chosen_in_group" not in summary:
        raise ConfigError(f"compare --pairs --chosen: {run_path} chose no model per group (its config has no output.compare_by)")
    return set(chosen_rows(summary)["model"])


def _same_ranking(runs: list[RunScores]) -> str:
    ranks = {r.label: r.config.ranking_column() for r in runs}
    if len(set(ranks.values())) > 1:
        choices = " or ".join(f"--metric {c}" for c in sorted({_on_validation(rank) for rank in ranks.values()}))
        raise ConfigError(f"compare --pairs: the runs rank by different columns (a test split in one run ranks on test); "
                          f"compare them on a validation score every run has, {choices}:",
                          [f"{label}: {rank}" for label, rank in ranks.items()])
    return next(iter(ranks.values()))


def _on_validation(rank: str) -> str:
    """The validation column of a ranking (val_iou for test_iou): every run scores its models on
    validation, so it is one they all have. A column of no split (best_val_loss) is itself."""
    split, metric = split_column(rank)
    return f"val_{metric}" if split else rank


def _same_seeding(runs: list[RunScores]) -> None:
    repeats = {r.label: r.config.train.repeats for r in runs}
    if len({n > 1 for n in repeats.values()}) > 1:
        raise ConfigError("compare --pairs: some runs trained one seed and others several; a one-seed model has no "
                          "seed-to-seed spread to weigh a difference against. Compare runs with repeats together "
                          "(train.repeats: 3 or more in each), or one-seed runs together (image noise only):",
                          [f"{label}: train.repeats {n}" for label, n in repeats.items()])


def _same_data(runs: list[RunScores], split: str) -> tuple[list[str], list[str]]:
    """The data settings that decide the scored images, equal in every run; returns those that
    may differ if the images check out one by one (`_same_images`): where the files are
    (`data.images`, ...: data moved to another machine), and, for runs compared on `split` "val",
    the test split's settings."""
    def deciding(config: ExperimentConfig) -> dict:
        settings = config.data.model_dump(mode="json")
        if isinstance(settings.get("tfds"), dict):
            settings["tfds.data_dir"] = settings["tfds"].pop("data_dir")
        return {k: v for k, v in settings.items() if k not in TRAINING_ONLY_DATA}

    first, rest = runs[0], runs[1:]
    base = deciding(first.config)
    problems, moved, other_split = [], [], []
    for run in rest:
        other = deciding(run.config)
        for key in sorted(set(base) | set(other)):
            if base.get(key) != other.get(key):
                where = other_split if split == "val" and key in TEST_SPLIT_DATA else moved if key in WHERE_DATA else problems
                where.append(f"data.{key}: {first.label} = {base.get(key)}, {run.label} = {other.get(key)}")
    if problems:
        raise ConfigError("compare --pairs: the runs' data settings differ, so their models were not scored on the same images:", problems)
    return moved, other_split


def _same_images(runs: list[RunScores], split: str, unsettled: list[str]) -> None:
    """Image by image, each run's scored images hold the same true pixels per class (the counts
    val_scores.csv / test_scores.csv keep): equal settings over files that changed would not.
    Runs whose data settings differ where that is allowed (`unsettled`, see `_same_data`) must pass
    this check: without counts they are refused."""
    if split not in ("val", "test"):
        if unsettled:
            raise ConfigError(f"compare --pairs: these data settings differ between the runs, and {split or 'this'} column has no "
                              "per-image scores to check that the scored images are the same:", unsettled)
        return  # a ranking column with no per-image basis: there is nothing per image to check or resample
    where = "test_scores.csv" if split == "test" else "val_scores.csv"
    truths = {}
    for run in runs:
        if not run.scored:
            raise ConfigError(f"compare --pairs: {run.label} has no per-image scores in its {where} to pair on")
        with_counts = [s for s in run.scored.values() if "truth" in s.quantities]
        truths[run.label] = np.asarray(with_counts[0].quantities["truth"]) if with_counts else None
    first = runs[0].label
    for label, truth in truths.items():
        if truth is None or truths[first] is None:
            if unsettled:
                raise ConfigError("compare --pairs: these data settings differ between the runs, and their members keep no true-mask "
                                  "counts to check that the scored images are the same:", unsettled)
            continue  # reconstruction members keep no counts: the data settings are the check
        if truth.shape != truths[first].shape:
            raise ConfigError(f"compare --pairs: {first} scored {len(truths[first])} images in {where}, {label} {len(truth)}: not the same images")
        differ = np.flatnonzero(np.any(truth.reshape(len(truth), -1) != truths[first].reshape(len(truth), -1), axis=1))
        if len(differ):
            raise ConfigError(f"compare --pairs: {first} and {label} were not scored on the same images: the true masks of "
                              f"{len(differ)} of {len(truth)} images in {where} differ (the first: image {int(differ[0])}); "
                              "was a data file changed between the runs?")


def _statistics(runs: list[RunScores], rank: str, same_model: bool = False) -> pd.DataFrame:
    """The runs' members under one name space (`<run label>: <model>`), compared across runs."""
    split, metric = split_column(rank)[0], metric_of(rank)

    def key(run: RunScores, name: str) -> str:
        return f"{run.label}{SEPARATOR}{name}"

    def across(a: str, b: str) -> bool:
        (run_a, model_a), (run_b, model_b) = a.rsplit(SEPARATOR, 1), b.rsplit(SEPARATOR, 1)
        return run_a != run_b and (model_a == model_b or not same_model)

    scored = {key(r, name): s for r in runs for name, s in r.scored.items() if name in set(r.members["member"])}
    if runs[0].config.train.repeats == 1:
        if metric not in BOOTSTRAPPED or not scored:
            raise ConfigError(f"compare --pairs: one-seed runs have no per-image scores of {rank} to compare on "
                              f"(compare on {', '.join(column(m) for m in BOOTSTRAPPED)} or their test_ twins, or train with repeats)")
        _, pairs = bootstrap_metric(scored, metric, split=split, compared=across)
        return pairs
    per_seed = pd.concat([r.members.assign(model=[key(r, m) for m in r.members["model"]], member=[key(r, m) for m in r.members["member"]]) for r in runs],
                         ignore_index=True)
    draws = image_draws(scored, metric) if metric in BOOTSTRAPPED and split in ("val", "test") else None
    _, pairs = across_seeds(per_seed, rank, draws, split, any(r.config.data.bootstrap_train for r in runs), compared=across)
    return mark_equivalence(pairs, _shared_margin(runs, rank))


def _shared_margin(runs: list[RunScores], rank: str) -> float | None:
    """The runs' `output.equivalence_margin` where they all set the same one for the metric compared
    on (their ranking column: the margin is in its units); else none."""
    margins = {r.config.output.equivalence_margin for r in runs}
    same_metric = all(r.config.ranking_column() == rank for r in runs)
    return margins.pop() if len(margins) == 1 and same_metric else None


def _labelled(pairs: pd.DataFrame) -> pd.DataFrame:
    """model_a / model_b split into the run and the model, the runs first."""
    if pairs.empty:
        return pairs
    out = pairs.copy()
    for side in ("a", "b"):
        parts = out[f"model_{side}"].str.rsplit(SEPARATOR, n=1)
        out[f"run_{side}"], out[f"model_{side}"] = parts.str[0], parts.str[1]
    first = ["run_a", "model_a", "run_b", "model_b"]
    return out[first + [c for c in out.columns if c not in first]]


def _unfinished_note(runs: list[RunScores]) -> str | None:
    left = [f"{', '.join(r.unfinished)} of {r.label}" for r in runs if r.unfinished]
    return ("Not compared, as they did not finish (a score from fewer steps): " + "; ".join(left) + ".") if left else None


def _seeds_note(runs: list[RunScores]) -> str | None:
    """Runs of different `train.repeats`: a pair across them is paired by repeat, over the repeats
    both its models have, so its interval rests on the smaller count, which the verdict's "over N
    training seeds" says without saying the larger run's other seeds were left out."""
    counts = {r.label: r.config.train.repeats for r in runs}
    if len(set(counts.values())) < 2:
        return None
    fewest, most = min(counts.values()), max(counts.values())
    return (f"The runs trained different numbers of seeds ({', '.join(f'{label} {n}' for label, n in counts.items())}): a pair across "
            f"them is paired by repeat, over the repeats both its models have, so a pair with a model of a {fewest}-seed run rests "
            f"on {fewest} seeds (the pairs' `seeds` column), not on {most}.")


def _same_networks_note(runs: list[RunScores]) -> str | None:
    """Models whose every member scored the same on every image in two runs: the same trained
    networks (a run and its copy, or a deterministic run made again), whose pair's difference of
    zero says nothing of how the model trains."""
    same = []
    for first, second in combinations(runs, 2):
        shared = [m for m in first.scored or {} if m in (second.scored or {})]
        differ = {model_of(m) for m in shared if not _scored_alike(first.scored[m], second.scored[m])}
        if models := list(dict.fromkeys(model_of(m) for m in shared if model_of(m) not in differ)):
            same.append(f"{', '.join(models)} of {first.label} and {second.label}")
    if not same:
        return None
    return ("Scored the same on every image in two runs, so these are the same trained networks (a run and its copy, or a "
            "deterministic run made again), and their difference of 0 says nothing of how the model trains: " + "; ".join(same) + ".")


def _scored_alike(a, b) -> bool:
    return all(np.array_equal(q, b.quantities.get(k)) for k, q in a.quantities.items())


def _own_loss_note(runs: list[RunScores], rank: str) -> str | None:
    """What the run itself warns of (training/actions.py `validation_warnings`): a column of each
    model's own loss compares models that trained on different losses."""
    if rank not in OWN_LOSS_RANKINGS:
        return None
    losses = sorted({loss for r in runs for loss in r.config.mask_losses()})
    if len(losses) < 2:
        return None
    return (f"{rank} is each model's own training loss, and these models trained on different losses ({', '.join(losses)}): "
            "part of each difference is the loss, not the model.")


def _versions_note(runs: list[RunScores]) -> str | None:
    """Which library versions differ between the runs (part of a difference may be the software)."""
    differing = [f"{package}: " + ", ".join(f"{label} {version}" for label, version in held.items())
                 for package, held in differing_versions({r.label: r.versions for r in runs}).items()]
    return ("The runs used different versions (part of a difference may be the software): " + "; ".join(differing) + ".") if differing else None
