"""Everything derived from a run's rows: summary.csv, pairs.csv, plots/, report.html.

Called at the end of a run, and by `harness report RUN_DIR` to rebuild them from the files alone
(losses.csv, run.json, config.yaml, and the exported models for the sample predictions).

This module decides what is written and in what order; the writing is done by the output
processes (outputs/pool.py runs outputs/tasks.py), which loaded their libraries while the run
trained and draw several plots at once. In order: the statistics and tables, and meanwhile the
curves (they need only losses.csv); then the plots of the summary and the samples (whose
predictions this process makes, as it holds the models); the report page last, once every plot is
on disk.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.config.schema import ExperimentConfig
from harness.core.scores import shows_foreground
from harness.errors import ConfigError, HarnessError
from harness.outputs import pool
from harness.outputs.figures import FigureJob, curve_figures, summary_figures
from harness.outputs.tables import base_model, load_losses, load_summary
from harness.rundir import FolderLock, RunDir, RunRecord, RunStatus
from harness.rundir.start_folder import elsewhere_hint


def missing_score_tables(run: RunDir, record: RunRecord) -> list[str]:
    """The per-image score tables a run wrote that are gone: test_scores.csv of a run that scored
    its test split (run.json `test`); val_scores.csv of a run whose summary.csv has intervals
    (`interval_covers`: every run since the per-image scores writes both)."""
    missing = []
    if record.scored_test() and not run.test_scores_csv.is_file():
        missing.append(f"{run.test_scores_csv.name}: every test image's scores (the test_* columns and the ranking on test)")
    if not run.val_scores_csv.is_file() and "interval_covers" in _first_line(run.summary_csv):
        missing.append(f"{run.val_scores_csv.name}: every validation image's scores (the intervals' image part, selected_val_*)")
    return missing


def _first_line(path: Path) -> str:
    if not path.is_file():
        return ""
    with path.open(encoding="utf-8", errors="replace") as handle:
        return handle.readline()


TASKS = "harness.outputs.tasks"  # named, not imported: this process need not load what they load


def write_outputs(run: RunDir, config: ExperimentConfig, record: RunRecord, samples=None) -> pd.DataFrame:
    """Write the tables and plots; return the per-model summary. The report page follows
    (`write_report_page`), once run.json has its final facts.

    `samples` is (images, masks, {model: predict}) when the caller has the models at hand;
    otherwise a samples.png already in plots/ is kept.
    """
    tables = pool.submit(f"{TASKS}:write_tables", run, config, record)
    out = config.output
    if not out.plot_formats:  # `plot_formats: []`: the tables only
        return pool.result(tables)[0]
    losses = load_losses(run.losses_csv)
    drawn = [_draw(job, run, config, record) for job in curve_figures(losses, out.log_scale, config.compare_loss(), scored_on_common_loss(config))]
    summary, pairs = pool.result(tables)
    rank = config.ranking_column(record.scored_test())
    seeds = load_summary(run.summary_members_csv) if config.train.repeats > 1 and run.summary_members_csv.is_file() else None
    drawn += [_draw(job, run, config, record) for job in summary_figures(summary, rank, pairs, seeds)]
    if samples is not None:
        images, masks, predictors = samples
        shown, title = models_in_samples(list(predictors), summary, rank)
        title = samples_title(title, config.train.repeats, config.seed, record.chose_any_weights())
        predictions = {model: np.asarray(predictors[model](images)) for model in shown}
        reconstructions = frozenset(m.name for m in config.models if not m.predicts_masks)
        drawn.append(_draw(FigureJob("samples", "plot_samples", (images, masks, predictions, title, reconstructions)), run, config, record))
    for future in drawn:
        pool.result(future)
    return summary


def _draw(job: FigureJob, run: RunDir, config: ExperimentConfig, record: RunRecord):
    return pool.submit(f"{TASKS}:draw", job, run.plots, tuple(config.output.plot_formats), record)


def write_report_page(run: RunDir, config: ExperimentConfig, record: RunRecord) -> Path:
    """report.html from the tables and plots already on disk."""
    return pool.run(f"{TASKS}:write_report_page", run, config, record)


def scored_on_common_loss(config: ExperimentConfig) -> set[str] | None:
    """The members compared on the common loss (every one that predicts masks)."""
    return {m.name for m in config.member_specs() if m.predicts_masks} if config.compare_loss() else None


SAMPLE_POOL = 8  # samples.png picks its `count` images from the first count x this validation images


def sample_batch(config: ExperimentConfig, count: int, scan=None, val=None):
    """`count` validation images and masks, the same ones for every model, every run: of the
    first `count` x SAMPLE_POOL, those whose truth marks some foreground, in order, and the first
    that marks none in the last place (a false alarm on an empty image shows there) when there is
    one. Real tiles are often empty: the first four of real_images' validation images were three
    empty ones, predicted empty by every model. `val`: the run's validation dataset when it is at
    hand (building the pipelines again cost 0.4 s)."""
    if val is None:
        from harness.data.pipeline import build_datasets

        val = build_datasets(config.data, config.training_seeds()[:1], 0, 1, scan).val
    marked, empty, seen = [], [], 0
    for batch_images, batch_masks in val:
        for image, mask in zip(batch_images.numpy(), batch_masks.numpy()):
            kept = marked if shows_foreground(mask) else empty
            if len(kept) < count:  # at most count of each: a large image is megabytes
                kept.append((image, mask))
        seen += len(batch_images)
        if (len(marked) >= count and empty) or seen >= count * SAMPLE_POOL:
            break
    picked = marked[:count - 1] + empty[:1] if empty and len(marked) >= count else (marked + empty)[:count]
    return np.stack([i for i, _ in picked]), np.stack([m for _, m in picked])


def draws_samples(config: ExperimentConfig) -> bool:
    """Whether samples.png is drawn: some sample images asked for, and plots drawn at all."""
    return config.output.sample_images > 0 and bool(config.output.plot_formats)


SAMPLE_MODELS = 8  # columns of predictions samples.png shows at most: the best ones, in ranking order


def samples_from_models(config: ExperimentConfig, by_member: dict[str, Any], scan=None, val=None):
    """(images, masks, {model: its first repeat's value in `by_member`}): a predictor, whose
    predictions are made when samples.png is drawn, for the models it shows; or a member, for the
    caller to predict with (the end of a run, with the weights the test split scored)."""
    if not draws_samples(config):
        return None
    images, masks = sample_batch(config, config.output.sample_images, scan, val)
    firsts = {}
    for member, value in by_member.items():
        firsts.setdefault(base_model(member), value)
    return images, masks, firsts


def models_in_samples(models: list[str], summary: pd.DataFrame, rank_by: str) -> tuple[list[str], str]:
    """Every model, in config order, when they fit; else the SAMPLE_MODELS best by the ranking (a
    grid of 40 models' masks is unreadable, and drawing it took 3.4 s of a run's end)."""
    title = "validation samples: the same images for every model"
    if len(models) <= SAMPLE_MODELS:
        return models, title
    ranked = [m for m in summary["model"].astype(str) if m in models] if "model" in summary else []
    shown = (ranked + [m for m in models if m not in ranked])[:SAMPLE_MODELS]
    return shown, f"validation samples: the {len(shown)} best of {len(models)} models by {rank_by} (summary.csv ranks them all)"


def samples_title(title: str, repeats: int, seed: int, chose_weights: bool) -> str:
    """samples.png's title: which models (`title`), which of each model's seeds (its first: one
    network of the R, not their mean), which weights."""
    if repeats > 1:
        title += f"\neach model's first of {repeats} seeds (seed {seed})"
    if chose_weights:
        title += "\nwith the weights chosen on validation, which the test split scored"
    return title


def samples_from_exports(run: RunDir, config: ExperimentConfig):
    """Sample predictions from models/<member>/model.keras (best.keras where the test split scored
    the weights chosen on validation), for rebuilding a report from disk.

    Files only: the models are loaded with Keras's safe mode (no code stored in a file runs), and
    the validation images come from the data files the config lists; nothing a run directory
    names is imported. Without its data or its models, the samples already in plots/ are kept."""
    import sys

    from harness.data.resolve import resolve_data
    if not draws_samples(config):  # before loading any model
        return None
    exported = {}
    record = run.read_record()
    for spec in config.member_specs():
        path = run.path / "models" / spec.name / record.scored_file(spec.name)
        if path.exists():
            try:
                model = load_exported_model(path)
            except ConfigError as exc:  # a model of the user's own layers, or a file that would run code
                print(f"harness: warning: sample predictions not redrawn (plots/samples.png kept): {exc}", file=sys.stderr)
                return None
            exported[spec.name] = lambda x, m=model: m(x, training=False).numpy()
    if not exported:
        return None
    try:
        config, scan = resolve_data(config, 1, run.path.absolute().parent / ".data-cache")
    except HarnessError as exc:
        where = elsewhere_hint(config, record.started_in)
        print(f"harness: warning: sample predictions not redrawn, the data cannot be read: {where or exc}", file=sys.stderr)
        return None
    return samples_from_models(config, exported, scan)


def load_exported_model(path: Path):
    """A model.keras loaded in safe mode; ConfigError (exit 2) naming the file if it is refused."""
    from harness.core.keras_files import load_keras_model
    try:
        return load_keras_model(path)
    except Exception as exc:  # Keras raises ValueError, TypeError and its own for unloadable files
        raise ConfigError(
            f"{path} cannot be loaded safely (it needs code that a model file may not run, or is damaged): "
            f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
        ) from None


def unfinished_note(run_dir: Path) -> str | None:
    """For `harness report` of a run that did not complete: the table just printed is what it had
    (a run stopped before its first evaluation has no scores at all), and what to do next."""
    run = RunDir(Path(run_dir))
    record = run.read_record()
    if record.status == RunStatus.COMPLETED:
        return None
    where = f"at step {record.steps_done} of {record.total_steps}" if record.total_steps else f"after {record.steps_done} step(s)"
    if record.status == RunStatus.FAILED and record.error:
        then = f"run.json says why ({record.error.splitlines()[0][:200]})"
    elif record.total_steps and record.steps_done >= record.total_steps:  # stopped during the end of the run
        then = f"training is done: harness resume {run.resumed_from} does the end of the run (what a run does after its last step), training nothing"
    else:
        then = f"harness resume {run.resumed_from} continues it"
    # Still `running` here means its process is gone: the report took the run's lock, which a live run holds.
    state = "stopped without a word (killed; run.json still says running)" if record.status == RunStatus.RUNNING else record.status
    return f"This run {'is ' if record.status != RunStatus.RUNNING else ''}{state} {where}: the report holds what it had by then; {then}."


def rebuild(run_dir: Path) -> pd.DataFrame:
    """`harness report RUN_DIR`: everything derived, again, from what the run directory holds."""
    run = RunDir(Path(run_dir))
    if unmerged := run.groups_not_merged():
        raise ConfigError(f"nothing to report at the top of this run yet: {unmerged}")
    record = run.read_record()
    config = run.read_config()
    with FolderLock(run.path, purpose="report"):  # a run still writing its rows holds it: exit 5
        if missing := missing_score_tables(run, record):
            raise ConfigError(f"{run.path} lacks a table its summary.csv was built from; rebuilt without it, "
                              "summary.csv would lose those columns. Put it back (a copy of the run has it); nothing was rewritten:", missing)
        summary = write_outputs(run, config, record, samples_from_exports(run, config))
        write_report_page(run, config, record)
        return summary
