"""What the output processes run (outputs/pool.py): each task a function of picklable arguments
that writes some of a run's files. Importing this module loads the output libraries (pandas,
scipy.stats through the statistics, matplotlib); a worker does it as it starts, and a process with
no workers does it when it first needs one of these tasks.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd

from harness.config.metrics import declare_higher_is_better, split_column
from harness.config.schema import ExperimentConfig
from harness.outputs import plots
from harness.outputs.derived import scored_on_common_loss
from harness.outputs.html_charts import report_charts
from harness.outputs.report import render_departures_section, render_group_section, render_groups_section, render_nightly_section, render_race_section, render_report
from harness.outputs.tables import build_member_summary, build_pairs, build_summary, load_losses, save_table, with_settings
from harness.outputs.tuning_budget import budget_table
from harness.outputs.uncertainty import class_metrics, interval_covers, ranking_statistics, test_metrics
from harness.outputs.verdicts import choose_per_group, chosen_by_column, group_label, group_pairs, group_trials, model_settings
from harness.outputs.verdict_text import validation_choices
from harness.rundir import RunDir, RunRecord, atomic_write_text, read_csv


def warm_up() -> None:
    """What a process pays at its first figure and first statistic, paid while the run trains:
    matplotlib's fonts (at its first text) and scipy.stats (at its first interval)."""
    import scipy.stats  # noqa: F401

    fig, ax = plots.plt.subplots(figsize=(1, 1))
    ax.set_title("warm-up 0.1")
    fig.savefig(io.BytesIO(), format="png", dpi=20)
    plots.plt.close(fig)


def declare(record: RunRecord) -> None:
    """The metrics the members declared higher-is-better, known in this process too."""
    declare_higher_is_better(name for m in record.models.values() for name in m.higher_is_better)


def write_tables(run: RunDir, config: ExperimentConfig, record: RunRecord) -> tuple[pd.DataFrame, pd.DataFrame]:
    """summary.csv, pairs.csv (and summary_members.csv with repeats; compare_by.csv,
    expected_best.csv and its plot with `output.compare_by`); returns (summary, pairs)."""
    declare(record)
    losses = load_losses(run.losses_csv)
    member_summary = build_member_summary(losses, {name: m.as_dict() for name, m in record.models.items()})
    for scored in (class_metrics(run.val_scores_csv, config.data.classes), test_metrics(run.test_scores_csv, run.val_scores_csv, config.data.classes)):
        if len(scored):
            member_summary = member_summary.merge(scored, on="model", how="left")
    rank = config.ranking_column(record.scored_test())
    intervals, pair_stats = ranking_statistics(run.val_scores_csv, config, member_summary, rank, run.test_scores_csv)
    summary = with_settings(build_summary(member_summary, rank, intervals, pair_stats), config.models)
    if (covers := interval_covers(config, rank)) is not None and len(summary):
        low = f"{rank}_low"  # said of the rows that have an interval only
        has_interval = summary[low].notna() if low in summary else pd.Series(False, index=summary.index)
        summary["interval_covers"] = has_interval.map({True: covers, False: None})
    member_summary = with_settings(member_summary, config.member_specs())
    pairs = build_pairs(losses, config.compare_loss(), pair_stats, scored_on_common_loss(config))
    if config.output.compare_by:
        summary = write_group_verdicts(run, config, summary, member_summary, rank)
    save_table(summary, run.summary_csv)
    save_table(pairs, run.path / "pairs.csv")
    if config.train.repeats > 1:
        save_table(member_summary, run.summary_members_csv)
    return summary, pairs


def draw(job, folder: Path, formats: tuple[str, ...], record: RunRecord) -> Path:
    """One figure (`figures.FigureJob`) into plots/."""
    declare(record)
    return plots.draw(job, folder, formats)


def write_group_verdicts(run: RunDir, config: ExperimentConfig, summary: pd.DataFrame, member_summary: pd.DataFrame, rank: str) -> pd.DataFrame:
    """compare_by.csv: the model chosen on validation in each group, compared pairwise on `rank`;
    summary gains `compare_group` and `chosen_in_group`."""
    keys = config.output.compare_by
    chosen = choose_per_group(summary, config.models, keys, rank)
    chosen_models = set(chosen["model"]) if len(chosen) else set()
    _, stats = ranking_statistics(run.val_scores_csv, config, member_summary, rank, run.test_scores_csv, models=chosen_models)
    save_table(group_pairs(chosen, stats), run.path / "compare_by.csv")
    write_tuning_budget(run, config, summary, rank)
    settings = model_settings(config.models)
    summary = summary.copy()
    summary["compare_group"] = [group_label(settings.get(m, {}), keys) for m in summary["model"]]
    summary["chosen_in_group"] = summary["model"].isin(set(chosen["model"]) if len(chosen) else set())
    return summary


EXPECTED_BEST = "expected_best"  # expected_best.csv and plots/expected_best.png


def write_tuning_budget(run: RunDir, config: ExperimentConfig, summary: pd.DataFrame, rank: str) -> pd.DataFrame:
    """expected_best.csv and its plot: each group's expected best score by `rank` against the
    number of models it tried (harness/outputs/tuning_budget.py)."""
    by = chosen_by_column(summary, rank)
    reported = rank if by != rank and split_column(rank)[0] == "test" and rank in summary else None
    table = budget_table(group_trials(summary, config.models, config.output.compare_by), by, reported)
    save_table(table, run.path / f"{EXPECTED_BEST}.csv")
    if len(table) and config.output.plot_formats:
        plots.save_figure(plots.plot_expected_best(table), run.plots, EXPECTED_BEST, config.output.plot_formats)
    return table


PLOT_ORDER = ("final_", "pair_differences", "quality_vs_cost", EXPECTED_BEST, "samples")
AS_CHARTS = ("loss_curves", "val_metrics", "learning_rates")  # plots/ keeps their PNG and SVG


def write_report_page(run: RunDir, config: ExperimentConfig, record: RunRecord) -> Path:
    """report.html from the tables and plots already on disk."""
    declare(record)
    rank = config.ranking_column(record.scored_test())
    summary = read_csv(run.summary_csv)
    pairs_file = run.path / "pairs.csv"
    pairs = read_csv(pairs_file) if pairs_file.exists() else pd.DataFrame()
    drawn = [p for p in run.plots.glob("*.png") if p.stem not in AS_CHARTS]  # the curves are interactive charts in the page
    drawn = sorted(drawn, key=lambda p: next((i for i, s in enumerate(PLOT_ORDER) if p.stem.startswith(s)), 99))
    extra = [("Groups", render_groups_section(record.groups))] if record.groups else []
    if record.race:
        extra.append(("Race", render_race_section(record.race)))
    if departures := render_departures_section(record.models, record.race):
        extra.append(("Members that left the run", departures))
    group_file = run.path / "compare_by.csv"
    if config.output.compare_by and group_file.exists():
        extra.insert(0, (f"Per group: {', '.join(config.output.compare_by)}, each at its best on validation",
                         render_group_section(summary, _read_or_empty(group_file), rank,
                                              _read_or_empty(run.path / f"{EXPECTED_BEST}.csv"))))
    nightly_file = run.path / "nightly.json"
    if nightly_file.exists():
        extra.append(("Nightly: changes and trends", render_nightly_section(json.loads(nightly_file.read_text(encoding="utf-8")), run.path)))
    charts = report_charts(load_losses(run.losses_csv), config.compare_loss(), scored_on_common_loss(config))
    page = render_report(record, config.to_yaml(), summary, pairs, drawn, rank, extra, charts, config.data.has_test, validation_choices(config, rank))
    path = run.path / "report.html"
    atomic_write_text(path, page)
    return path


def _read_or_empty(path: Path) -> pd.DataFrame:
    try:
        return read_csv(path)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()
