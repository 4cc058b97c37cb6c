"""`harness nightly CONFIG`: tonight's run of an experiment, recorded and compared with earlier nights.

  1. lock the experiment folder (a second nightly of the same experiment exits 5);
  2. find tonight's run in the history: none -> start one (registered before training, so a kill
     leaves a run to resume); interrupted -> resume it; already recorded -> nothing to train;
  3. record its summary in the history (one transaction);
  4. compare with the previous completed night and the pinned baseline, per the thresholds;
  5. write nightly.json/nightly.md, trend plots and the report's nightly section;
  6. drop the checkpoints of runs older than the newest N (tables, exports, history stay);
  7. exit 6 if anything regressed, else 0.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd

from harness import rundir as rd
from harness.config.schema import ExperimentConfig
from harness.errors import ConfigError, EXIT_OK, EXIT_REGRESSION, HarnessError, Interrupted, closest, did_you_mean
from harness.nights.history import HistoryStore, RunMeasurements, RunRecord, recorded_versions, seeds_of_each_run
from harness.nights.regressions import Change, compare, metrics_added, models_added_or_removed
from harness.nights.common_repeats import over_common_repeats
from harness.nights.paired import paired_changes
from harness.outputs import pool
from harness.outputs.columns import format_cell, is_finite, markdown_text
from harness.outputs.compare import setting_lines
from harness.outputs.derived import write_report_page
from harness.outputs.stuck import STUCK_SEEDS, stuck_seed_counts
from harness.rundir import FolderLock, read_csv
from harness.rundir.hardware import describe as describe_machine, differs, several

NIGHTLY_JSON = "nightly.json"
NIGHTLY_MD = "nightly.md"
TREND_FOLDER = "nightly"  # plots/nightly/: kept apart from the run's own comparison plots


@dataclass
class NightlyResult:
    night: str
    run_dir: Path
    changes: list[Change]
    notes: list[str]
    trained: bool  # False when tonight's run was already recorded
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def regressions(self) -> list[Change]:
        return [c for c in self.changes if c.regressed]

    @property
    def exit_code(self) -> int:
        return EXIT_REGRESSION if self.regressions else EXIT_OK


def current_night(starts_at_hour: int, now: datetime | None = None) -> str:
    """The local date a night is named by: 02:00 on the 22nd belongs to the night of the 21st."""
    now = now or datetime.now().astimezone()
    return (now - timedelta(hours=starts_at_hour)).date().isoformat()


def run_nightly(
    config: ExperimentConfig,
    results_dir: Path | None = None,
    night: str | None = None,
    code_dir: Path | None = None,
) -> NightlyResult:
    from harness.training.preflight import check_extras, check_module_paths

    check_module_paths(config)  # a module that cannot be found, said as `harness run` says it
    check_extras(config)  # before tonight's run, or the history, is made
    settings = config.output.nightly
    folder = rd.make_experiment_folder(config, results_dir)
    night = night or current_night(settings.night_starts_at_hour)
    with FolderLock(folder, purpose="nightly"):
        from harness.members.registry import check_code
        from harness.members.trial import trial_build
        from harness.training.entry import prepare_process, resolve_data_sizes

        check_code(config)
        prepare_process(config)
        config, scan = resolve_data_sizes(config, results_dir)  # tonight's run is matched on the resolved config
        trial_build(config)
        store = HistoryStore.beside(folder)
        commit = git_commit(code_dir or Path.cwd())
        run, trained = _train_tonight(config, scan, folder, store, night, commit)
        with signals_acknowledged(run):
            if trained:
                store.record_run(measurements(run, night, commit, regressions=None))
            result = _compare_and_report(config, store, run, night, trained)
            removed = apply_retention(store, settings.keep_checkpoints_of_runs)
        if removed:
            result.notes.append(f"checkpoints removed (retention {settings.keep_checkpoints_of_runs} runs): {', '.join(removed)}")
        return result


def signals_acknowledged(run: rd.RunDir):
    """Once tonight's run is trained, what is left (recording it, the comparison, retention) takes
    seconds: a SIGTERM or Ctrl-C then is answered at once and the nightly finishes it (a second
    Ctrl-C stops at once, exit 130). Unhandled, a SIGTERM there (a systemd stop) ended the process
    with 143 and no word. A flag, not an exception raised from the handler: that can land in a
    weakref callback, which swallows it and goes on."""
    from harness.training.controller import StopFlag

    again = "the same harness nightly command again writes what is missing and trains nothing"
    return StopFlag(notice=f"tonight's run {run.path.name} is trained; harness records it in the history and finishes its comparison "
                           f"with earlier nights (seconds), then exits (Ctrl-C again: stop at once; {again})",
                    at_once=f"stopped at once (exit 130): tonight's run {run.path.name} is trained, its record in the history and "
                            f"comparison with earlier nights perhaps not written; {again}")


# ---------------------------------------------------------------------------------------------
# 2. Train (or resume) tonight's run (run_nightly records it)


def _train_tonight(config: ExperimentConfig, scan, folder: Path, store: HistoryStore, night: str, commit: str | None):
    """Tonight's run, trained or resumed, and whether this call trained it (the caller records it)."""
    from harness.scale.launch import resume, start_run

    existing = _tonights_run(store, folder, night, config)
    if existing is not None and (recorded := store.get(existing.path.name)) and recorded.status == "completed":
        print(f"harness: the night of {night} is already recorded ({existing.path}); nothing to train", file=sys.stderr)
        return existing, False
    resuming = existing is not None and existing.run_json.exists()
    if resuming:
        run = existing
        print(f"harness: resuming tonight's run {run.path}", file=sys.stderr)
    else:
        run = existing or rd.create_run_dir(config, folder.parent)
        store.register_night(night, run.path.name)  # before training: a kill leaves a run to resume
    try:
        if resuming:
            resume(run.path)
        else:
            start_run(config, folder.parent, run=run, scan=scan)
    except Interrupted:
        raise  # resumable: the next nightly of this night continues it
    except Exception:
        _record_failure(store, run, night, commit)
        raise
    return run, True


def _record_failure(store: HistoryStore, run: rd.RunDir, night: str, commit: str | None) -> None:
    """A failed night shows in the history; the original error is what the user needs, so a
    failure to record (the disk may be what failed) does not replace it."""
    try:
        if run.run_json.exists():
            store.record_run(measurements(run, night, commit, regressions=None))
    except (HarnessError, OSError, ValueError):
        pass


def _tonights_run(store: HistoryStore, folder: Path, night: str, config: ExperimentConfig) -> rd.RunDir | None:
    """Tonight's registered run, if it can be continued with this config."""
    run_id = store.run_for_night(night)
    if run_id is None or not (folder / run_id).is_dir():
        return None
    run = rd.RunDir(folder / run_id)
    if run.run_json.exists():
        try:
            record = run.read_record()
        except ConfigError:
            return None
        # The rule `resume` applies: a setting harness added since that run, at its default, is no change.
        if not config.trains_as_recorded(record.config_fingerprint, record.config):
            changed = config.changed_since(record.config)
            listed = f" ({_listed(changed, 'compare its config.yaml with yours')})" if changed else ""
            print(f"harness: the experiment changed since tonight's run {run_id} started{listed}; starting a new run for the night",
                  file=sys.stderr)
            return None
    return run


def measurements(run: rd.RunDir, night: str | None, commit: str | None, regressions: int | None) -> RunMeasurements:
    """What the history keeps of a run: run.json's facts and every numeric summary.csv column."""
    info = run.read_record()
    metrics: dict[tuple[str, str], float] = {}
    status: dict[str, str] = {}
    if run.summary_csv.exists():
        summary = read_csv(run.summary_csv)
        for _, row in summary.iterrows():
            model = str(row["model"])
            status[model] = str(row.get("status", "ok"))
            for column, value in row.items():
                if column in ("model", "status", "rank"):
                    continue
                number = pd.to_numeric(value, errors="coerce")
                if pd.notna(number) or column.startswith(("val_", "best_", "final_")):
                    metrics[(model, str(column))] = float(number) if pd.notna(number) else math.nan
    # Each model's stuck seeds counted (summary.csv names them): regressions.compare judges them.
    spreads = {member: facts.output_spread for member, facts in info.models.items()}
    metrics.update({(model, STUCK_SEEDS): float(count) for model, count in stuck_seed_counts(spreads).items()})
    record = RunRecord(
        run_id=run.path.name,
        night=night,
        status=str(info.status),
        fingerprint=info.config_fingerprint,
        git_commit=commit,
        run_dir=str(run.path.resolve()),
        regressions=regressions,
    )
    return RunMeasurements(
        record=record,
        started=info.started,
        ended=info.ended,
        versions=info.versions,
        devices=info.devices or [],
        placement=info.placement or {},
        model_status=status,
        metrics=metrics,
        race=tuple((info.race or {}).get("correlations") or ()),
    )


def git_commit(folder: Path) -> str | None:
    """The commit of the user's code (the folder nightly was started from), `-dirty` if it has
    uncommitted changes; None outside a git checkout or without git."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=folder, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip()[:12] + ("-dirty" if dirty.stdout.strip() else "")


# ---------------------------------------------------------------------------------------------
# 4-5. Compare and report


def _compare_and_report(config: ExperimentConfig, store: HistoryStore, run: rd.RunDir, night: str, trained: bool) -> NightlyResult:
    run_id = run.path.name
    thresholds = config.nightly_thresholds()
    now, now_status = store.metrics_of(run_id), store.model_status_of(run_id)
    changes: list[Change] = []
    notes: list[str] = []
    references = {"previous": store.previous_completed(night, excluding=run_id)}
    baseline_id = store.baseline()
    references["baseline"] = store.get(baseline_id) if baseline_id and baseline_id != run_id else None
    compared = dict(references)
    if references["baseline"] is not None and references["previous"] is not None and references["baseline"].run_id == references["previous"].run_id:
        compared["baseline"] = None  # one run, compared once: a drop is one regression, not two
        notes.append(f"the baseline is the previous night's run ({references['previous'].run_id}): compared once")
    for against, reference in compared.items():
        if against == "baseline" and reference is None and references["baseline"] is not None:
            continue
        if reference is None:
            notes.append(f"no {against} run to compare with" + (" (pin one: harness history NAME --pin RUN_ID)" if against == "baseline" else ""))
            continue
        before, before_status = store.metrics_of(reference.run_id), store.model_status_of(reference.run_id)
        now_then, before, repeats_notes = over_common_repeats(now, before, reference.run_dir, reference.run_id, run.path, list(thresholds))
        notes += [f"{against}: {n}" for n in repeats_notes]
        paired, unpaired = paired_changes(reference.run_dir, reference.run_id, run.path, thresholds)
        notes += [f"{against}: {n}" for n in unpaired]
        machine = other_machine(run, reference.run_dir)
        changes += compare(now_then, before, now_status, before_status, thresholds, against, reference.run_id, config.data.bootstrap_train, paired, machine)
        added = models_added_or_removed(now_status, before_status) + metrics_added(now, before, thresholds)
        notes += [f"{against} ({reference.run_id}): {n}" for n in added]
        notes += config_notes(reference, run.path, against, reference.fingerprint != store.get(run_id).fingerprint)
        notes += _versions_note(store, reference.run_id, run_id, against)
    watched = {metric for _, metric in now}
    notes += [f"threshold for {m!r}, but summary.csv has no such column: it watches nothing{likely_column(m, watched)}"
              for m in sorted(set(thresholds) - watched)]
    result = NightlyResult(night, run.path, changes, notes, trained)
    store.set_verdict(run_id, [(c.against, c.against_run, c.model, c.metric, c.before, c.now, c.allowed) for c in result.regressions])
    store.set_meta("watched", list(thresholds))  # what `harness history` shows by default, in the config's order
    result.report = write_nightly_report(config, store, run, result, references)
    return result


def _versions_note(store: HistoryStore, earlier: str, run_id: str, against: str) -> list[str]:
    """`other versions than the previous run (...): tensorflow 2.20.0 -> 2.21.0`, or nothing (the
    same versions, or a run that recorded none)."""
    changed = rd.version_changes(store.versions_of(earlier), store.versions_of(run_id))
    return [f"other versions than the {against} run ({earlier}): " + ", ".join(f"{p} {c}" for p, c in changed.items())] if changed else []


SETTINGS_LISTED = 4  # a note names at most this many changed settings (`harness compare` lists them all)


def config_notes(earlier: RunRecord, tonight: Path, against: str, fingerprints_differ: bool) -> list[str]:
    """What changed in the config since the earlier run, read from both config.yaml files
    (output.select_by and export included): the settings that differ ("train.optimizer.learning_rate:
    a = 0.003, b = 1e-07"), then apart those its harness did not have yet (an upgrade's, at their
    defaults: no change of the experiment). Its folder gone, only the fingerprint can say."""
    said = f"the {against} run ({earlier.run_id})"
    if not earlier.run_dir or not (Path(earlier.run_dir) / "config.yaml").is_file():
        return [f"the experiment's config changed since {said}"] if fingerprints_differ else []
    differing, not_had = setting_lines([Path(earlier.run_dir), tonight])
    notes = [f"the experiment's config changed since {said}: {_listed(differing)}"] if differing else []
    if fingerprints_differ and not differing and not not_had:
        notes.append(f"the experiment's config changed since {said}")
    if not_had:
        notes.append(f"settings that {said}'s harness did not have yet, at defaults meant to keep what it did: {_listed(not_had)}")
    return notes


def _listed(lines: list[str], where_all: str = "harness compare lists them") -> str:
    more = f"; and {len(lines) - SETTINGS_LISTED} more ({where_all})" if len(lines) > SETTINGS_LISTED else ""
    return "; ".join(lines[:SETTINGS_LISTED]) + more


def other_machine(run: rd.RunDir, earlier_dir: str | None) -> str | None:
    """How the earlier run's machine differs from tonight's, or None (the same, or not known: its
    folder is gone or its run.json predates `hardware`)."""
    now = run.recorded_machine()
    then = rd.RunDir(Path(earlier_dir)).recorded_machine() if earlier_dir else None
    if not differs(now, then):
        return None
    spread = [f"{who} models were timed on {describe_machine(machine)}" for who, machine in (("tonight's", now), ("that run's", then)) if several(machine)]
    if spread:  # which group, so which model, landed on which machine changes from night to night
        return "; ".join(spread)
    return f"that run's machine ({describe_machine(then)}) is not tonight's ({describe_machine(now)})"


def likely_column(name: str, columns: set[str]) -> str:
    """A typo's likely meaning ("val_iuo" for "val_iou"), or nothing."""
    close = closest(name, sorted(columns), cutoff=0.75)
    return f" (did you mean {close!r}?)" if close else ""


def write_nightly_report(config: ExperimentConfig, store: HistoryStore, run: rd.RunDir, result: NightlyResult, references) -> dict[str, Any]:
    history = store.table()
    regressed = store.alerts()  # every night's, so past regressions stay visible in the trends
    # PNG first, whatever else plot_formats asks for (the report and nightly.md show the PNGs). With
    # `plot_formats: []` no task at all: no history sent to an output process, no figure made.
    plots = []
    if config.output.plot_formats:
        formats = tuple(dict.fromkeys(["png", *config.output.plot_formats]))
        plots = pool.run("harness.outputs.trend_plots:save_trend_plots", run.plots / TREND_FOLDER, history, sorted(config.nightly_thresholds()), store.baseline(), regressed, formats, store.version_changes())
    report = {
        "night": result.night,
        "run_id": run.path.name,
        "previous": references["previous"].run_id if references["previous"] else None,
        "previous_night": references["previous"].night if references["previous"] else None,
        "baseline": references["baseline"].run_id if references["baseline"] else None,
        "regressions": len(result.regressions),
        "watched": list(config.nightly_thresholds()),
        "changes": [c.as_dict() for c in result.changes],
        "notes": result.notes,
        "trend_plots": [str(p.relative_to(run.path)) for p in plots],
    }
    rd.atomic_write_text(run.path / NIGHTLY_JSON, json.dumps(report, indent=2, default=_json_number) + "\n")
    rd.atomic_write_text(run.path / NIGHTLY_MD, render_markdown(config.name, report, history))
    # The latest night also beside the runs, its image links pointing into the run's folder.
    rd.atomic_write_text(run.path.parent / NIGHTLY_MD, render_markdown(config.name, report, history, f"{run.path.name}/"))
    write_report_page(run, config, run.read_record())
    return report


def _of_night(report: dict[str, Any]) -> str:
    """` (night of 2026-12-01)` after the previous run's id; `(earlier the same night)` for a run
    the night trained before tonight's, its config since changed (it was called the previous night)."""
    night = report.get("previous_night")
    if not report.get("previous") or not night:
        return ""
    return " (earlier the same night)" if night == report["night"] else f" (night of {night})"


def _json_number(value: Any) -> Any:
    return None if isinstance(value, float) and not is_finite(value) else value


def render_markdown(name: str, report: dict[str, Any], history: pd.DataFrame, link_prefix: str = "") -> str:
    verdict = f"**{report['regressions']} regression(s)**" if report["regressions"] else "no regression"
    lines = [
        f"# {name}: night of {report['night']}",
        "",
        f"Run `{report['run_id']}`: {verdict}. Previous run: `{report['previous'] or '-'}`{_of_night(report)}; "
        f"baseline: `{report['baseline'] or '-'}`.",
        "",
    ]
    for against in ("previous", "baseline"):
        rows = [c for c in report["changes"] if c["against"] == against]
        if not rows:
            continue
        lines += [f"## Against the {against} run (`{rows[0]['against_run']}`)", "", "| model | metric | before | now | change | allowed | verdict |", "| --- | --- | --- | --- | --- | --- | --- |"]
        for c in rows:
            verdict_cell = "**REGRESSION**" + (f" ({c['note']})" if c["note"] else "") if c["regressed"] else (c["note"] or "ok")
            lines.append(
                f"| {markdown_text(c['model'])} | {markdown_text(c['metric'])} | {format_cell(c['before'])} | {format_cell(c['now'])} | {_fmt_change(c)} | {c['allowed']} | {verdict_cell} |"
            )
        lines.append("")
    if report["notes"]:
        lines += ["## Notes", ""] + [f"- {markdown_text(n)}" for n in report["notes"]] + [""]
    lines += ["## History", "", markdown_table(history_pivot(history, report["watched"])), ""]
    if report["trend_plots"]:
        lines += ["## Trends", ""] + [f"![{Path(p).stem}]({link_prefix}{p})" for p in report["trend_plots"]] + [""]
    return "\n".join(lines)


def _fmt_change(change: dict[str, Any]) -> str:
    before, now = change["before"], change["now"]
    if not all(is_finite(v) for v in (before, now)):
        return "-"
    relative = f" ({(now - before) / abs(before):+.1%})" if before else ""
    return f"{now - before:+.4g}{relative}"


def markdown_table(frame: pd.DataFrame) -> str:
    if not len(frame):
        return "(empty)"
    cells = [[markdown_text(v) for v in row] for row in frame.itertuples(index=False)]
    lines = ["| " + " | ".join(map(markdown_text, frame.columns)) + " |", "| " + " | ".join("---" for _ in frame.columns) + " |"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in cells])


def history_pivot(history: pd.DataFrame, metrics: list[str] | None = None) -> pd.DataFrame:
    """One row per run (failed ones too), one column per model x metric: what `harness history` prints.
    Metric by metric (every model's first metric, then every model's second): a terminal shows the
    first columns that fit, and those then set every model side by side on the first metric."""
    if not len(history):
        return pd.DataFrame(columns=["night", "run_id", "status", "commit", "harness", "regressions"])
    facts = history.drop_duplicates("run_id").set_index("run_id")[["night", "run_status", "git_commit", "versions", "regressions"]]
    # harness's version beside the user's commit: a night whose scores moved with it says so.
    facts.insert(3, "harness", facts.pop("versions").map(lambda text: str(recorded_versions(text).get("harness", ""))))
    seeds = seeds_of_each_run(history)
    if (seeds > 1).any():  # each night's figures are means over this many seeds: say so where it varies or is above 1
        facts["seeds"] = seeds.reindex(facts.index).astype("Int64")
    measured = history.dropna(subset=["metric"])
    if metrics:
        measured = measured[measured["metric"].isin(metrics)]
    if len(measured):
        values = measured.pivot_table(index="run_id", columns=["model", "metric"], values="value", aggfunc="first", dropna=False)
        # The metrics in the order asked for (or watched), not alphabetical; the models by name.
        values = values[sorted(values.columns, key=lambda pair: (metrics.index(pair[1]) if metrics else pair[1], pair[0]))]
        values.columns = [f"{model} {metric}" for model, metric in values.columns]
        facts = facts.join(values)
    table = facts.reset_index().rename(columns={"run_status": "status", "git_commit": "commit"})
    return table[["night", "run_id", *[c for c in table.columns if c not in ("night", "run_id")]]]


# ---------------------------------------------------------------------------------------------
# 6. Retention


def apply_retention(store: HistoryStore, keep_runs: int) -> list[str]:
    """Remove checkpoints/ of recorded runs older than the newest `keep_runs` (never the pinned
    baseline's), their groups' included. Tables, plots, exported models and history rows are
    never deleted."""
    runs = store.runs()
    keep = {r.run_id for r in runs[-keep_runs:]} | {store.baseline()}
    removed = []
    for record in runs:
        if record.run_id in keep or not record.run_dir:
            continue
        folders = [Path(record.run_dir) / "checkpoints", *Path(record.run_dir).glob("groups/*/checkpoints")]
        present = [f for f in folders if f.is_dir()]
        for checkpoints in present:
            shutil.rmtree(checkpoints)
        if present:
            removed.append(record.run_id)
    return removed


# ---------------------------------------------------------------------------------------------
# `harness history`


def find_history(name_or_dir: str | Path, results_dir: Path | None = None) -> HistoryStore:
    """An experiment's history from its name (under the results folder) or its folder."""
    # An absolute path, or one under the results folder: the same folder twice, looked in once.
    folders = list(dict.fromkeys((Path(name_or_dir), Path(results_dir or "results") / str(name_or_dir))))
    for folder in folders:
        if (folder / "history.sqlite").is_file():
            return HistoryStore.beside(folder)
    looked = " and ".join(str(folder / "history.sqlite") for folder in folders)
    results = Path(results_dir or "results")
    kept = sorted(p.name for p in results.iterdir() if (p / "history.sqlite").is_file()) if results.is_dir() else []
    hint = did_you_mean(str(name_or_dir), kept, "experiments with a history there:") if kept else ""
    raise ConfigError(f"no history for {str(name_or_dir)!r}: looked for {looked}{hint}; `harness nightly CONFIG` creates one")


def history_table(store: HistoryStore, metrics: list[str] | None = None) -> pd.DataFrame:
    """One row per run; with races, a `spearman rung N (epoch E)` column per rung. A metric asked
    for that no run recorded is refused with the recorded ones (it showed no column, silently)."""
    history = store.table()
    recorded = sorted(set(history["metric"].dropna())) if len(history) else []
    for metric in (metrics or []) if recorded else []:  # an empty history has nothing to check against
        if metric not in recorded:
            raise ConfigError(f"history --metric {metric}: no run in {store.path} recorded it{did_you_mean(metric, recorded)}")
    table = history_pivot(history, metrics or store.meta("watched") or None)
    race = store.race_table()
    if not len(race):
        return table
    race["column"] = [f"spearman rung {r} (epoch {e})" for r, e in zip(race["rung"], race["epoch"])]
    wide = race.pivot(index="run_id", columns="column", values="spearman")
    return table.merge(wide.reset_index(), on="run_id", how="left")
