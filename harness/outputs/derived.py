"""Everything derived from a run's rows: summary.csv, pairs.csv, plots/, report.html.

Called at the end of a run, and by `harness report RUN_DIR` to rebuild them from the files alone
(losses.csv, run.json, config.yaml, and the exported models for the sample predictions).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.config.metrics import declare_higher_is_better, split_column
from harness.config.schema import ExperimentConfig
from harness.errors import ConfigError, HarnessError
from harness.outputs.html_charts import report_charts
from harness.outputs.plots import plot_expected_best, plot_samples, save_figure, save_plots
from harness.outputs.report import render_departures_section, render_group_section, render_groups_section, render_nightly_section, render_race_section, render_report
from harness.outputs.tables import base_model, build_member_summary, build_pairs, build_summary, load_losses, save_table, with_settings
from harness.outputs.uncertainty import interval_covers, ranking_statistics, test_metrics
from harness.outputs.tuning_budget import budget_table
from harness.outputs.verdicts import choose_per_group, chosen_by_column, group_label, group_pairs, group_trials, model_settings
from harness.rundir import FolderLock, RunDir, RunRecord, atomic_write_text


def write_outputs(run: RunDir, config: ExperimentConfig, record: RunRecord, samples=None) -> pd.DataFrame:
    """Write the tables, plots and report; return the per-model summary.

    `samples` is (images, masks, {model: predictions}) when the caller has the models at hand;
    otherwise a samples.png already in plots/ is kept.
    """
    losses = load_losses(run.losses_csv)
    declare_higher_is_better(name for m in record.models.values() for name in m.higher_is_better)
    member_summary = build_member_summary(losses, {name: m.as_dict() for name, m in record.models.items()})
    tested = test_metrics(run.test_scores_csv, run.val_scores_csv, config.data.classes)
    if len(tested):
        member_summary = member_summary.merge(tested, on="model", how="left")
    intervals, pair_stats = ranking_statistics(run.val_scores_csv, config, member_summary, run.test_scores_csv)
    summary = with_settings(build_summary(member_summary, config.ranking_column(), intervals, pair_stats), config.models)
    if (covers := interval_covers(config)) is not None and len(summary):
        low = f"{config.ranking_column()}_low"  # said of the rows that have an interval only
        has_interval = summary[low].notna() if low in summary else pd.Series(False, index=summary.index)
        summary["interval_covers"] = has_interval.map({True: covers, False: None})
    member_summary = with_settings(member_summary, config.member_specs())
    on_common = scored_on_common_loss(config)
    pairs = build_pairs(losses, config.compare_loss(), pair_stats, on_common)
    if config.output.compare_by:
        summary = write_group_verdicts(run, config, summary, member_summary)
    save_table(summary, run.summary_csv)
    save_table(pairs, run.path / "pairs.csv")
    if config.train.repeats > 1:
        save_table(member_summary, run.path / "summary_members.csv")
    save_plots(run.plots, losses, summary, config.ranking_column(), config.output.log_scale, pairs, config.compare_loss(), on_common, config.output.plot_formats)
    if samples is not None:
        images, masks, predictors = samples
        shown, title = models_in_samples(list(predictors), summary, config.ranking_column())
        predictions = {model: np.asarray(predictors[model](images)) for model in shown}
        save_figure(plot_samples(images, masks, predictions, title), run.plots, "samples", config.output.plot_formats)
    write_report_page(run, config, record)
    return summary


def _read_or_empty(path: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()


def write_group_verdicts(run: RunDir, config: ExperimentConfig, summary: pd.DataFrame, member_summary: pd.DataFrame) -> pd.DataFrame:
    """compare_by.csv: the model chosen on validation in each group, compared pairwise; summary
    gains `compare_group` and `chosen_in_group`."""
    keys, rank = config.output.compare_by, config.ranking_column()
    chosen = choose_per_group(summary, config.models, keys, rank)
    _, stats = ranking_statistics(run.val_scores_csv, config, member_summary, run.test_scores_csv, models=set(chosen["model"]) if len(chosen) else set())
    save_table(group_pairs(chosen, stats), run.path / "compare_by.csv")
    write_tuning_budget(run, config, summary)
    settings = model_settings(config.models)
    summary = summary.copy()
    summary["compare_group"] = [group_label(settings.get(m, {}), keys) for m in summary["model"]]
    summary["chosen_in_group"] = summary["model"].isin(set(chosen["model"]) if len(chosen) else set())
    return summary


EXPECTED_BEST = "expected_best"  # expected_best.csv and plots/expected_best.png


def write_tuning_budget(run: RunDir, config: ExperimentConfig, summary: pd.DataFrame) -> pd.DataFrame:
    """expected_best.csv and its plot: each group's expected best score against the number of
    models it tried (harness/outputs/tuning_budget.py)."""
    rank = config.ranking_column()
    by = chosen_by_column(summary, rank)
    reported = rank if by != rank and split_column(rank)[0] == "test" and rank in summary else None
    table = budget_table(group_trials(summary, config.models, config.output.compare_by), by, reported)
    save_table(table, run.path / f"{EXPECTED_BEST}.csv")
    if len(table):
        save_figure(plot_expected_best(table), run.plots, EXPECTED_BEST, config.output.plot_formats)
    return table


PLOT_ORDER = ("final_", "pair_differences", "quality_vs_cost", EXPECTED_BEST, "samples")
AS_CHARTS = ("loss_curves", "val_metrics", "learning_rates")  # plots/ keeps their PNG and SVG


def scored_on_common_loss(config: ExperimentConfig) -> set[str] | None:
    """The members compared on the common loss (every one that predicts masks)."""
    return {m.name for m in config.member_specs() if m.predicts_masks} if config.compare_loss() else None


def write_report_page(run: RunDir, config: ExperimentConfig, record: RunRecord) -> Path:
    """report.html from the tables and plots already on disk."""
    summary = pd.read_csv(run.summary_csv)
    pairs_file = run.path / "pairs.csv"
    pairs = pd.read_csv(pairs_file) if pairs_file.exists() else pd.DataFrame()
    plots = [p for p in run.plots.glob("*.png") if p.stem not in AS_CHARTS]  # the curves are interactive charts in the page
    plots = sorted(plots, key=lambda p: next((i for i, s in enumerate(PLOT_ORDER) if p.stem.startswith(s)), 99))
    extra = [("Groups", render_groups_section(record.groups))] if record.groups else []
    if record.race:
        extra.append(("Race", render_race_section(record.race)))
    if departures := render_departures_section(record.models, record.race):
        extra.append(("Members that left the run", departures))
    group_file = run.path / "compare_by.csv"
    if config.output.compare_by and group_file.exists():
        extra.insert(0, (f"Per group: {', '.join(config.output.compare_by)}, each at its best on validation",
                         render_group_section(summary, _read_or_empty(group_file), config.ranking_column(),
                                              _read_or_empty(run.path / f"{EXPECTED_BEST}.csv"))))
    nightly_file = run.path / "nightly.json"
    if nightly_file.exists():
        extra.append(("Nightly: changes and trends", render_nightly_section(json.loads(nightly_file.read_text(encoding="utf-8")), run.path)))
    charts = report_charts(load_losses(run.losses_csv), config.compare_loss(), scored_on_common_loss(config))
    page = render_report(record, config.to_yaml(), summary, pairs, plots, config.ranking_column(), extra, charts)
    path = run.path / "report.html"
    atomic_write_text(path, page)
    return path


def sample_batch(config: ExperimentConfig, count: int, scan=None, val=None):
    """The first `count` validation images and masks: the same ones for every model, every run.
    `val`: the run's validation dataset when it is at hand (building the pipelines again cost 0.4 s)."""
    if val is None:
        from harness.data.pipeline import build_datasets

        val = build_datasets(config.data, config.training_seeds()[:1], 0, 1, scan).val
    images, masks = [], []
    for batch_images, batch_masks in val:
        images.append(batch_images.numpy())
        masks.append(batch_masks.numpy())
        if sum(len(i) for i in images) >= count:
            break
    return np.concatenate(images)[:count], np.concatenate(masks)[:count]


SAMPLE_MODELS = 8  # columns of predictions samples.png shows at most: the best ones, in ranking order


def samples_from_models(config: ExperimentConfig, predict_by_member: dict[str, Any], scan=None, val=None):
    """(images, masks, {model: predict}) for the first repeat of every model; the predictions are
    made when samples.png is drawn, for the models it shows."""
    count = config.output.sample_images
    if count == 0:
        return None
    images, masks = sample_batch(config, count, scan, val)
    predictors = {}
    for member, predict in predict_by_member.items():
        predictors.setdefault(base_model(member), predict)
    return images, masks, predictors


def models_in_samples(models: list[str], summary: pd.DataFrame, rank_by: str) -> tuple[list[str], str]:
    """Every model, in config order, when they fit; else the SAMPLE_MODELS best by the ranking (a
    grid of 40 models' masks is unreadable, and drawing it took 3.4 s of a run's end)."""
    title = "validation samples: the same images for every model"
    if len(models) <= SAMPLE_MODELS:
        return models, title
    ranked = [m for m in summary["model"].astype(str) if m in models] if "model" in summary else []
    shown = (ranked + [m for m in models if m not in ranked])[:SAMPLE_MODELS]
    return shown, f"validation samples: the {len(shown)} best of {len(models)} models by {rank_by} (summary.csv ranks them all)"


def samples_from_exports(run: RunDir, config: ExperimentConfig):
    """Sample predictions from models/<member>/model.keras, for rebuilding a report from disk.

    Files only: the models are loaded with Keras's safe mode (no code stored in a file runs), and
    the validation images come from the data files the config lists; nothing a run directory
    names is imported. Without its data or its models, the samples already in plots/ are kept."""
    import sys

    from harness.data.resolve import resolve_data
    exported = {}
    for spec in config.member_specs():
        path = run.path / "models" / spec.name / "model.keras"
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
        config, scan = resolve_data(config, 1, run.path.parent / ".data-cache")
    except HarnessError as exc:
        print(f"harness: warning: sample predictions not redrawn, the data cannot be read: {exc}", file=sys.stderr)
        return None
    return samples_from_models(config, exported, scan)


def load_exported_model(path: Path):
    """A model.keras loaded in safe mode; ConfigError (exit 2) naming the file if it is refused."""
    from harness.core.backend import import_keras
    keras = import_keras()
    try:
        return keras.models.load_model(path, compile=False, safe_mode=True)
    except Exception as exc:  # Keras raises ValueError, TypeError and its own for unloadable files
        raise ConfigError(
            f"{path} cannot be loaded safely (it needs code that a model file may not run, or is damaged): "
            f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
        ) from None


def rebuild(run_dir: Path) -> pd.DataFrame:
    """`harness report RUN_DIR`: everything derived, again, from what the run directory holds."""
    run = RunDir(Path(run_dir))
    record = run.read_record()
    config = run.read_config()
    with FolderLock(run.path, purpose="report"):  # a run still writing its rows holds it: exit 5
        return write_outputs(run, config, record, samples_from_exports(run, config))
