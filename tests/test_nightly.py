"""Nightly runs: the history store, regression verdicts, idempotency, locking and retention.

The verdict tests use seeded random histories in a real SQLite file (no training); the end-to-end
test drives `harness nightly` / `harness history` in subprocesses over three nights.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import REPO, run_cli, run_main, start_cli, tiny_config, write_yaml

from harness.config.nightly_spec import NightlySpec, ThresholdSpec
from harness.config.loading import validate_config
from harness.errors import ConfigError
from harness.nights.history import HistoryStore, RunMeasurements, RunRecord
from harness.nights.tonight import current_night, history_pivot
from harness.nights.regressions import compare
from harness.rundir import read_csv

THRESHOLDS = {
    "val_iou": ThresholdSpec(abs=0.02),
    "best_val_loss": ThresholdSpec(rel=0.10),
    "ms_per_step": ThresholdSpec(rel=0.25),
    "images_per_s": ThresholdSpec(rel=0.20),
}
HIGHER = {"val_iou": True, "best_val_loss": False, "ms_per_step": False, "images_per_s": True}


def record(store: HistoryStore, run_id: str, night: str, values: dict, status: dict | None = None, versions: dict | None = None) -> None:
    models = sorted({m for m, _ in values})
    store.record_run(
        RunMeasurements(
            record=RunRecord(run_id, night, "completed", "f" * 16, None, None, None),
            started=f"{night}T00:00:00", ended=None, versions=versions or {}, devices=[], placement={},
            model_status=status or {m: "ok" for m in models}, metrics=values,
        )
    )


def verdicts(store: HistoryStore, now: str, before: str) -> set[tuple[str, str]]:
    changes = compare(
        store.metrics_of(now), store.metrics_of(before), store.model_status_of(now), store.model_status_of(before),
        THRESHOLDS, "previous", before,
    )
    return {(c.model, c.metric) for c in changes if c.regressed}


def step_change(rng: random.Random, metric: str, before: float, regress: bool) -> float:
    """A new value: worse than allowed by 1.3-3x the threshold, or anything from much better
    to worse by at most 0.8x the threshold."""
    threshold = THRESHOLDS[metric]
    limit = threshold.abs if threshold.abs is not None else threshold.rel * abs(before)
    worse = limit * (rng.uniform(1.3, 3.0) if regress else rng.uniform(-3.0, 0.8))
    return before - worse if HIGHER[metric] else before + worse


@pytest.mark.parametrize("seed", range(5))
def test_seeded_regressions_are_flagged_exactly(tmp_path, seed):
    """Random 12-night histories of 4 models x 4 metrics with regressions injected at random:
    every injected one is flagged, nothing else is (no misses, no false alarms)."""
    rng = random.Random(seed)
    store = HistoryStore(tmp_path / "history.sqlite")
    models = ["unet", "fpn", "linknet", "pspnet"]
    values = {(m, k): rng.uniform(0.2, 0.8) if k in ("val_iou", "best_val_loss") else rng.uniform(10, 500) for m in models for k in THRESHOLDS}
    record(store, "run-00", "2026-11-01", values)
    injected_total = 0
    for night in range(1, 12):
        injected = {key for key in values if rng.random() < 0.15}
        injected_total += len(injected)
        values = {key: step_change(rng, key[1], value, key in injected) for key, value in values.items()}
        run_id = f"run-{night:02d}"
        record(store, run_id, f"2026-11-{night + 1:02d}", values)
        assert verdicts(store, run_id, f"run-{night - 1:02d}") == injected
    assert injected_total > 10  # the seeds do inject regressions


def test_threshold_edges_nan_divergence_and_new_models(tmp_path):
    store = HistoryStore(tmp_path / "history.sqlite")
    record(store, "a", "2026-11-01", {("unet", "val_iou"): 0.5, ("fpn", "val_iou"): 0.5, ("psp", "val_iou"): 0.5, ("old", "val_iou"): 0.5})
    record(
        store, "b", "2026-11-02",
        {("unet", "val_iou"): 0.48, ("fpn", "val_iou"): float("nan"), ("psp", "val_iou"): 0.6, ("new", "val_iou"): 0.1},
        status={"unet": "ok", "fpn": "ok", "psp": "diverged", "new": "ok"},
    )
    changes = compare(store.metrics_of("b"), store.metrics_of("a"), store.model_status_of("b"), store.model_status_of("a"), {"val_iou": ThresholdSpec(abs=0.02)}, "previous", "a")
    flagged = {(c.model, c.metric) for c in changes if c.regressed}
    # unet dropped by exactly 0.02 - allowed (within float rounding); fpn's value is gone; psp diverged
    assert flagged == {("fpn", "val_iou"), ("psp", "status")}
    assert not any(c.model in ("new", "old") for c in changes)
    # What the terminal says of each: a status by its change, a value gone as missing (not "nan").
    said = {(c.model, c.metric): c.describe() for c in changes}
    assert said[("psp", "status")] == "psp status vs previous a: ok -> diverged (must not diverge or run out of memory)"
    assert said[("fpn", "val_iou")] == "fpn val_iou vs previous a: 0.5 -> missing (allowed: abs 0.02) now missing or not finite"
    assert said[("unet", "val_iou")] == "unet val_iou vs previous a: 0.5 -> 0.48 (allowed: abs 0.02)"


def test_a_seed_that_fails_is_a_regression_and_one_that_stops_early_or_leaves_a_race_is_not():
    before = {"a": "ok", "b": "stopped (2/3)", "c": "ok", "d": "ok", "e": "stopped"}
    now = {"a": "stopped (3/3)", "b": "diverged (1/3), stopped (2/3)", "c": "dropped", "d": "oom", "e": "diverged"}
    changes = compare({}, {}, now, before, {}, "previous", "run-1")
    assert {c.model for c in changes if c.metric == "status" and c.regressed} == {"b", "d", "e"}


def test_a_model_that_learned_before_and_is_stuck_tonight_is_a_regression():
    """Counted stuck seeds (outputs/stuck.py) against the earlier run's: a model every seed of which
    learned then and one of which is stuck now has regressed, whether or not a threshold watches it."""
    before = {("unet", "stuck_seeds"): 0.0, ("unet", "output_spread"): 0.42, ("fpn", "stuck_seeds"): 1.0,
              ("psp", "stuck_seeds"): 0.0, ("own", "stuck_seeds"): 0.0, ("old", "val_iou"): 0.5}
    now = {("unet", "stuck_seeds"): 1.0, ("unet", "output_spread"): 0.0031, ("fpn", "stuck_seeds"): 2.0,
           ("psp", "stuck_seeds"): 0.0, ("old", "stuck_seeds"): 1.0}  # own: not measured tonight; old: not before
    status = {m: "ok" for m in ("unet", "fpn", "psp", "own", "old")}
    changes = compare(now, before, status, status, {}, "previous", "a")
    assert [(c.model, c.metric, c.regressed) for c in changes] == [("unet", "stuck_seeds", True)]  # fpn was stuck then too
    assert changes[0].describe() == (
        "unet stuck_seeds vs previous a: 0 -> 1 (allowed: no stuck seed) stuck now, learning then: output_spread 0.42 -> 0.0031 "
        "(the seeds' mean; under 0.01 a seed's output is nearly the same for every image); summary.csv's stuck_seeds names the seeds")


@pytest.mark.slow  # two runs; compare() on counts is the fast tier's
def test_a_nightly_whose_model_got_stuck_exits_6_naming_it(tmp_path):
    """Two nights through the nightly itself: the second night's `b` gives the same output for every
    image (tests/custom_kinds.py ConstantOutput). Its history records each model's stuck seeds, and
    the night is a regression (exit 6) whose nightly.md names the model."""
    from harness.nights.tonight import run_nightly

    fcn = {"name": "fcn", "arch": "tiny_fcn", "optimizer": {"name": "adam", "learning_rate": 0.01}}
    learning = tiny_config(models=[fcn, {**fcn, "name": "b"}], train={"epochs": 3})
    assert run_nightly(validate_config(learning), tmp_path, "2026-12-05").exit_code == 0
    stuck = tiny_config(models=[fcn, {"name": "b", "kind": "custom_kinds:ConstantOutput", "arch": "tiny_fcn"}], train={"epochs": 3})
    result = run_nightly(validate_config(stuck), tmp_path, "2026-12-06")
    assert result.exit_code == 6
    assert ("b", "stuck_seeds") in {(c.model, c.metric) for c in result.regressions}
    assert not any(c.metric == "stuck_seeds" for c in result.changes if c.model == "fcn")
    store = HistoryStore.beside(tmp_path / "tiny")
    assert store.metrics_of(result.run_dir.name)[("b", "stuck_seeds")] == 1 and store.metrics_of(result.run_dir.name)[("fcn", "stuck_seeds")] == 0
    assert "| b | stuck\\_seeds | 0 | 1 | +1 | no stuck seed | **REGRESSION** (stuck now, learning then" in (result.run_dir / "nightly.md").read_text()


def test_with_a_test_split_the_default_thresholds_watch_the_test_score_too():
    assert list(validate_config(tiny_config(data={"test_size": 8})).nightly_thresholds()) == ["test_iou", "val_iou", "best_val_loss"]  # what the ranking reports first
    assert set(validate_config(tiny_config()).nightly_thresholds()) == {"val_iou", "best_val_loss"}
    chosen = validate_config(tiny_config(data={"test_size": 8}, output={"nightly": {"thresholds": {"val_f1": {"abs": 0.01}}}}))
    assert set(chosen.nightly_thresholds()) == {"val_f1"}  # the user's own list is watched as written
    # autoencoders alone report no IoU: the defaults watch their loss, not a column summary.csv never has
    autoencoders = tiny_config(models=[{"name": "ae", "kind": "autoencoder", "arch": "small_autoencoder"}])
    assert list(validate_config(autoencoders).nightly_thresholds()) == ["val_loss", "best_val_loss"]
    assert list(validate_config({**autoencoders, "data": {**autoencoders["data"], "test_size": 8}}).nightly_thresholds()) == ["test_loss", "val_loss", "best_val_loss"]


def test_a_watched_metric_the_earlier_run_did_not_have_is_noted_not_passed_over():
    """A test split added since the earlier run: its test_iou has nothing to compare with, and the
    notes say so (it used to be left out without a word)."""
    from harness.nights.regressions import metrics_added

    thresholds = {"val_iou": ThresholdSpec(abs=0.02), "test_iou": ThresholdSpec(abs=0.02)}
    before = {("unet", "val_iou"): 0.5}
    now = {("unet", "val_iou"): 0.5, ("unet", "test_iou"): 0.4, ("unet", "test_f1"): 0.5}
    assert metrics_added(now, before, thresholds) == ["test_iou is new (that run has no such column): nothing earlier to compare it with"]
    assert metrics_added(now, now, thresholds) == []
    assert not any(c.metric == "test_iou" for c in compare(now, before, {"unet": "ok"}, {"unet": "ok"}, thresholds, "previous", "a"))


def _older_harness_run(folder: Path, config, dropped_from_data: str):
    """A run folder as an older harness left it: run.json's config and fingerprint, and
    config.yaml, without the data setting `dropped_from_data` (added to harness since)."""
    import hashlib

    from harness.rundir import RunDir, RunRecord as RunJson

    recorded = config.to_dict()
    del recorded["data"][dropped_from_data]
    payload = {k: v for k, v in recorded.items() if k not in ("output", "placement")}
    fingerprint = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]
    folder.mkdir(parents=True)
    run = RunDir(folder)
    run.write_record(RunJson(name="tiny", run_id=folder.name, status="completed", config=recorded, config_fingerprint=fingerprint))
    write_yaml(run.config_file, recorded)
    return run, fingerprint


def test_tonights_run_made_by_an_older_harness_is_tonights_run_still(tmp_path, capsys):
    """A harness upgraded during the night: tonight's run, recorded without a setting added since,
    was not this experiment's any more ("the experiment changed"), and the night was trained again
    from scratch. It is the same experiment, as `resume` judges it; a real change is named."""
    from harness.nights.tonight import _tonights_run

    config = validate_config(tiny_config())
    experiment = tmp_path / "tiny"
    run, _ = _older_harness_run(experiment / "20261203-021500", config, "exif_orientation")
    store = HistoryStore.beside(experiment)
    store.register_night("2026-12-02", run.path.name)
    assert _tonights_run(store, experiment, "2026-12-02", config).path == run.path
    assert "changed" not in capsys.readouterr().err
    longer = validate_config(tiny_config(train={"epochs": 3}))
    assert _tonights_run(store, experiment, "2026-12-02", longer) is None
    said = capsys.readouterr().err
    assert "the experiment changed since tonight's run 20261203-021500 started (train.epochs: 2 -> 3)" in said, said
    assert "exif_orientation" not in said


def test_settings_an_older_harness_did_not_have_are_noted_apart_from_a_change(tmp_path):
    """Against a run an older harness made, its config.yaml lacks every setting added since: the
    note listed them first, alphabetically, as the config's changes ("data.exif_orientation: a = -,
    b = ignore; ... and 9 more"), burying a real change; each night against that baseline said so."""
    from harness.nights.tonight import config_notes
    from harness.rundir import RunDir

    config = validate_config(tiny_config())
    earlier, _ = _older_harness_run(tmp_path / "tiny" / "20261201-021500", config, "exif_orientation")
    tonight = tmp_path / "tiny" / "20261202-021500"
    tonight.mkdir()
    write_yaml(RunDir(tonight).config_file, config.to_dict())
    reference = RunRecord("20261201-021500", "2026-12-01", "completed", "f1", None, str(earlier.path), 0)
    notes = config_notes(reference, tonight, "baseline", fingerprints_differ=True)
    assert notes == ["settings that the baseline run (20261201-021500)'s harness did not have yet, at defaults meant to keep what it did: "
                     "data.exif_orientation: tiny/20261201-021500 = -, tiny/20261202-021500 = ignore"], notes
    write_yaml(RunDir(tonight).config_file, validate_config(tiny_config(train={"epochs": 3})).to_dict())
    changed, not_had = config_notes(reference, tonight, "baseline", fingerprints_differ=True)
    assert changed == "the experiment's config changed since the baseline run (20261201-021500): train.epochs: tiny/20261201-021500 = 2, tiny/20261202-021500 = 3"
    assert not_had.startswith("settings that the baseline run")
    gone = RunRecord("20261201-021500", "2026-12-01", "completed", "f1", None, str(tmp_path / "gone"), 0)
    assert config_notes(gone, tonight, "previous", fingerprints_differ=True) == ["the experiment's config changed since the previous run (20261201-021500)"]
    assert config_notes(gone, tonight, "previous", fingerprints_differ=False) == []


def test_a_timing_against_a_night_on_another_machine_is_shown_not_judged(tmp_path):
    """ms_per_step doubled because the earlier night ran on a faster machine: no regression, and
    the change says why; a score on the same pair of nights is still judged."""
    from harness.nights.tonight import other_machine
    from harness.rundir import RunDir, RunRecord
    from harness.rundir.hardware import common_machine

    thresholds = {"ms_per_step": ThresholdSpec(rel=0.25), "val_iou": ThresholdSpec(abs=0.02)}
    before = {("unet", "ms_per_step"): 10.0, ("unet", "val_iou"): 0.50}
    now = {("unet", "ms_per_step"): 20.0, ("unet", "val_iou"): 0.40}
    ok = {"unet": "ok"}
    judged = {c.metric: c for c in compare(now, before, ok, ok, thresholds, "previous", "a")}
    assert judged["ms_per_step"].regressed and judged["val_iou"].regressed
    across = {c.metric: c for c in compare(now, before, ok, ok, thresholds, "previous", "a", other_machine="that run's machine (gpu-box) is not tonight's")}
    assert not across["ms_per_step"].regressed and across["ms_per_step"].note.startswith("not judged: that run's machine")
    assert across["val_iou"].regressed

    machines = {"here": {"host": "vm", "cpu": "Xeon", "cpus": 2, "gpus": []}, "there": {"host": "gpu-box", "cpu": "EPYC", "cpus": 64, "gpus": ["A100"]}}
    runs = {}
    for name, machine in (*machines.items(), ("older", None), ("same", machines["here"])):
        runs[name] = RunDir(tmp_path / name)
        runs[name].path.mkdir()
        runs[name].write_record(RunRecord(name="x", run_id=name, hardware=machine))
    said = other_machine(runs["here"], str(runs["there"].path))
    assert said == "that run's machine (gpu-box: EPYC x64, A100) is not tonight's (vm: Xeon x2, no GPU)"
    assert other_machine(runs["here"], str(runs["same"].path)) is None
    assert other_machine(runs["here"], str(runs["older"].path)) is None  # run.json from before `hardware`: not known to differ
    assert other_machine(runs["here"], str(tmp_path / "gone")) is None
    # a run whose groups Ray placed on two machines: its models' timings are judged against no run,
    # one on the same two machines included (a model may have landed on the other one)
    for name in ("spread", "spread_again"):
        runs[name] = RunDir(tmp_path / name)
        runs[name].path.mkdir()
        runs[name].write_record(RunRecord(name="x", run_id=name, hardware=common_machine([machines["here"], machines["there"], machines["here"]])))
    assert runs["spread"].recorded_machine() == {"machines": [machines["here"], machines["there"]]}
    assert other_machine(runs["spread"], str(runs["spread_again"].path)) == (
        "tonight's models were timed on 2 machines: vm: Xeon x2, no GPU; gpu-box: EPYC x64, A100; "
        "that run's models were timed on 2 machines: vm: Xeon x2, no GPU; gpu-box: EPYC x64, A100")
    assert other_machine(runs["here"], str(runs["spread"].path)) and other_machine(runs["spread"], str(runs["here"].path))
    assert common_machine([None, machines["here"], machines["here"]]) == machines["here"] and common_machine([None]) is None


def test_tonight_with_another_number_of_repeats_is_compared_over_the_repeats_both_trained(tmp_path):
    """Three seeds one night, one the next: the earlier mean (0.50) against tonight's single seed
    (0.40, the same seed's very value) read as a drop of 0.10. Over the repeat both trained it is
    0.40 against 0.40. A seed that diverged is left out, as summary.csv leaves it out."""
    from harness.nights.common_repeats import over_common_repeats

    earlier, tonight = tmp_path / "earlier", tmp_path / "tonight"
    earlier.mkdir(), tonight.mkdir()
    (earlier / "summary_members.csv").write_text(
        "model,status,val_iou,best_val_loss\nfcn@1,ok,0.40,0.9\nfcn@2,ok,0.60,0.8\nfcn@3,ok,0.50,0.7\n"
        "unet@1,diverged,0.0,9.0\nunet@2,ok,0.70,0.5\nunet@3,ok,0.65,0.6\n")
    (tonight / "summary.csv").write_text("model,status,val_iou,best_val_loss\nfcn,ok,0.40,0.9\nunet,ok,0.69,0.5\n")
    before = {("fcn", "val_iou"): 0.50, ("fcn", "best_val_loss"): 0.8, ("fcn", "repeats"): 3.0,
              ("unet", "val_iou"): 0.675, ("unet", "best_val_loss"): 0.55, ("unet", "repeats"): 3.0}
    now = {("fcn", "val_iou"): 0.40, ("fcn", "best_val_loss"): 0.9, ("fcn", "repeats"): 1.0, ("fcn", "val_iou_low"): 0.30, ("fcn", "val_iou_high"): 0.52,
           ("unet", "val_iou"): 0.69, ("unet", "best_val_loss"): 0.5, ("unet", "repeats"): 1.0}
    thresholds = {"val_iou": ThresholdSpec(abs=0.02), "best_val_loss": ThresholdSpec(rel=0.10)}
    status = {"fcn": "ok", "unet": "ok"}
    as_recorded = compare(now, before, status, status, thresholds, "previous", "r1")
    assert [(c.model, c.metric) for c in as_recorded if c.regressed] == [("fcn", "best_val_loss"), ("fcn", "val_iou")]

    now_common, before_common, notes = over_common_repeats(now, before, str(earlier), "r1", tonight, [*thresholds, "only_in_summary"])
    assert before_common[("fcn", "val_iou")] == pytest.approx(0.40) and now_common[("fcn", "val_iou")] == pytest.approx(0.40)
    assert ("fcn", "only_in_summary") not in before_common  # no per-seed column: left as recorded
    assert before_common[("unet", "val_iou")] == 0.675  # its only repeat tonight diverged then: nothing to pair, as recorded
    assert not [c for c in compare(now_common, before_common, status, status, thresholds, "previous", "r1") if c.regressed]
    assert notes == ["repeats differ from r1 (3 -> 1): each model compared over the repeats both runs trained (fcn@1), paired by repeat; "
                     "unet: no finished repeat in common, compared as recorded; summary.csv keeps each run's mean over all its seeds"]

    # Tonight with more seeds than then: its own interval (of a mean over three seeds) is dropped.
    now3, before1, _ = over_common_repeats({**before, ("fcn", "val_iou_low"): 0.4, ("fcn", "val_iou_high"): 0.6}, now, str(tonight), "r2", earlier, ["val_iou"])
    assert now3[("fcn", "val_iou")] == pytest.approx(0.40) and math.isnan(now3[("fcn", "val_iou_low")])

    # The earlier folder gone: compared as recorded, and said.
    kept_now, kept_before, gone = over_common_repeats(now, before, str(tmp_path / "gone"), "r1", tonight, list(thresholds))
    assert kept_now == now and kept_before == before and "compared as recorded" in gone[0]
    # Its table damaged (no model column left): compared as recorded, and said, not a traceback.
    (earlier / "summary_members.csv").write_text("garbage\n1\n")
    kept_now, kept_before, damaged = over_common_repeats(now, before, str(earlier), "r1", tonight, list(thresholds))
    assert kept_now == now and kept_before == before and "could not be read (KeyError" in damaged[0]
    # The same number of repeats: nothing to do.
    assert over_common_repeats(before, before, str(earlier), "r1", earlier, ["val_iou"]) == (before, before, [])


def test_threshold_needs_exactly_one_kind():
    with pytest.raises(ValueError):
        ThresholdSpec()
    with pytest.raises(ValueError):
        ThresholdSpec(abs=0.1, rel=0.1)
    with pytest.raises(ConfigError) as error:
        validate_config(tiny_config(output={"nightly": {"thresholds": {"val_iou": {}}}}))
    assert "output.nightly.thresholds.val_iou" in error.value.render() and "exactly one" in error.value.render()
    assert ThresholdSpec(rel=0.1, higher_is_better=True).higher_is_better


def test_a_signal_once_tonights_run_is_trained_is_answered_and_the_comparison_finished(tmp_path, monkeypatch, capsys):
    """A SIGTERM after tonight's run was trained, while it was recorded and compared (a systemd stop
    a few seconds late), ended the nightly with 143 and no word, its nightly.md unwritten. It is
    answered at once, the comparison is finished, and the handlers before it come back."""
    from harness.nights import tonight
    from harness.rundir import RunDir

    config = validate_config(tiny_config())
    run = RunDir(tmp_path / "tiny" / "20261206-021500")
    unhandled = []
    monkeypatch.setattr(tonight, "_train_tonight", lambda *args: (run, False))  # recorded already: nothing to train

    def compare_and_report(config, store, run, night, trained):
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 10
        while "SIGTERM received" not in (said := capsys.readouterr().err) and time.monotonic() < deadline:
            time.sleep(0.02)  # said by the thread that reads the signal's pipe
        compare_and_report.said = said
        return tonight.NightlyResult(night, run.path, [], [], trained)

    monkeypatch.setattr(tonight, "_compare_and_report", compare_and_report)
    def guard(*args):  # where the default handler would have ended the process
        unhandled.append(args)

    before = signal.signal(signal.SIGTERM, guard)
    try:
        result = tonight.run_nightly(config, tmp_path, "2026-12-05")
        assert signal.getsignal(signal.SIGTERM) is guard and not unhandled  # handled by the nightly, then given back
    finally:
        signal.signal(signal.SIGTERM, before)
    assert result.exit_code == 0
    assert "tonight's run 20261206-021500 is trained; harness records it in the history and finishes its comparison" in compare_and_report.said


def test_nightly_md_names_the_previous_runs_night_and_an_earlier_run_of_the_same_night_as_such(tmp_path):
    """A night trained again with a changed config compared with the run of that same night,
    which nightly.md called "Previous night". It names the run, then its night or that it was
    earlier the same night."""
    from harness.nights.tonight import render_markdown

    store = HistoryStore.beside(tmp_path)
    for run_id, night in (("r1", "2026-12-01"), ("r2", "2026-12-02"), ("r3", "2026-12-02")):
        record(store, run_id, night, {("fcn", "val_iou"): 0.5})
    report = {"night": "2026-12-02", "run_id": "r3", "baseline": None, "regressions": 0, "watched": ["val_iou"], "changes": [], "notes": [], "trend_plots": []}
    same = render_markdown("tiny", {**report, "previous": "r2", "previous_night": "2026-12-02"}, store.table())
    assert "Previous run: `r2` (earlier the same night); baseline: `-`." in same
    other = render_markdown("tiny", {**report, "previous": "r1", "previous_night": "2026-12-01"}, store.table())
    assert "Previous run: `r1` (night of 2026-12-01)" in other
    assert "Previous run: `-`; baseline" in render_markdown("tiny", {**report, "previous": None, "previous_night": None}, store.table())


def test_night_changes_at_the_configured_hour():
    from datetime import datetime

    assert current_night(12, datetime(2026, 11, 22, 2, 0)) == "2026-11-21"
    assert current_night(12, datetime(2026, 11, 22, 13, 0)) == "2026-11-22"
    assert current_night(0, datetime(2026, 11, 22, 0, 30)) == "2026-11-22"
    assert NightlySpec().night_starts_at_hour == 12


def test_recording_twice_replaces_and_pins_need_a_completed_run(tmp_path):
    store = HistoryStore(tmp_path / "history.sqlite")
    record(store, "a", "2026-11-01", {("unet", "val_iou"): 0.5})
    record(store, "a", "2026-11-01", {("unet", "val_iou"): 0.5})
    assert len(store.table()) == 1
    with pytest.raises(ConfigError, match="not a completed run"):
        store.pin("nope")
    store.pin("a")
    assert store.baseline() == "a"
    assert list(history_pivot(store.table())["run_id"]) == ["a"]


def test_history_shows_each_models_metrics_in_the_order_asked_for(tmp_path):
    """`--metric val_iou --metric val_f1` printed val_f1 first: the columns were alphabetical."""
    store = HistoryStore(tmp_path / "history.sqlite")
    record(store, "a", "2026-11-01", {("unet", "val_iou"): 0.5, ("unet", "val_f1"): 0.6, ("fcn", "val_iou"): 0.4, ("fcn", "val_f1"): 0.45})
    columns = [c for c in history_pivot(store.table(), ["val_iou", "val_f1"]).columns if " " in c]
    # Metric by metric: at 80 columns the first that fit set every model side by side on val_iou
    # (model by model, three models' history showed only the first two's metrics).
    assert columns == ["fcn val_iou", "unet val_iou", "fcn val_f1", "unet val_f1"]


def test_history_says_over_how_many_seeds_each_nights_figures_are_means_once_a_night_had_more_than_one(tmp_path):
    """Three seeds, then one, then three: 0.49, 0.40, 0.56 read as a model that swings, where the
    middle night is one seed of the others' means."""
    store = HistoryStore(tmp_path / "history.sqlite")
    record(store, "a", "2026-11-01", {("fcn", "val_iou"): 0.4883, ("fcn", "repeats"): 3.0})
    assert history_pivot(store.table(), ["val_iou"])["seeds"].tolist() == [3]  # a mean over three seeds: said from the first night
    record(store, "b", "2026-11-02", {("fcn", "val_iou"): 0.3968, ("fcn", "repeats"): 1.0})
    record(store, "c", "2026-11-03", {("fcn", "val_iou"): 0.5645, ("fcn", "repeats"): 3.0})
    record(store, "d", "2026-11-04", {("fcn", "val_iou"): 0.5})  # made before summary.csv had `repeats`
    table = history_pivot(store.table(), ["val_iou"]).set_index("run_id")
    assert table["seeds"].tolist()[:3] == [3, 1, 3] and table["seeds"].isna().tolist() == [False, False, False, True]
    one_seed = HistoryStore(tmp_path / "one.sqlite")
    record(one_seed, "a", "2026-11-01", {("fcn", "val_iou"): 0.5, ("fcn", "repeats"): 1.0})
    assert "seeds" not in history_pivot(one_seed.table(), ["val_iou"]).columns


def test_history_shows_the_harness_version_each_run_was_made_with(tmp_path):
    """A night whose scores moved with harness itself (0.1.0's multi-class dice) looked like any
    other: the table had the user's commit, not harness's version."""
    store = HistoryStore(tmp_path / "history.sqlite")
    record(store, "a", "2026-11-01", {("unet", "val_iou"): 0.5}, versions={"harness": "0.1.0", "tensorflow": "2.21.0"})
    record(store, "b", "2026-11-02", {("unet", "val_iou"): 0.6}, versions={"harness": "0.3.0"})
    record(store, "c", "2026-11-03", {("unet", "val_iou"): 0.6})  # recorded no versions
    table = history_pivot(store.table())
    assert table["harness"].tolist() == ["0.1.0", "0.3.0", ""]
    assert list(table.columns[:3]) == ["night", "run_id", "status"] and "commit" in table and "unet val_iou" in table


def test_trend_plots_mark_the_nights_whose_versions_changed(tmp_path):
    """A step in a trend made by another TensorFlow or harness looked like the models' own: the
    notes said it on that night only, the plots never."""
    import matplotlib.pyplot as plt

    from harness.outputs.trend_plots import plot_trend

    store = HistoryStore(tmp_path / "history.sqlite")
    record(store, "a", "2026-11-01", {("unet", "val_iou"): 0.5}, versions={"harness": "0.1.0", "tensorflow": "2.21.0"})
    record(store, "b", "2026-11-02", {("unet", "val_iou"): 0.5}, versions={"harness": "0.1.0", "tensorflow": "2.21.0"})
    record(store, "c", "2026-11-03", {("unet", "val_iou"): 0.6})  # recorded none: compared past it
    record(store, "d", "2026-11-04", {("unet", "val_iou"): 0.7}, versions={"harness": "0.3.0", "tensorflow": "2.21.0"})
    changes = store.version_changes()
    assert changes == {"d": {"harness": "0.1.0 -> 0.3.0"}}
    fig, ax = plt.subplots()
    plot_trend(ax, store.table(), "val_iou", version_changes=changes)
    marks = [line for line in ax.get_lines() if line.get_label() == "other versions"]
    assert len(marks) == 1 and marks[0].get_xdata()[0] == 2.5  # between the third night and the fourth
    assert [t.get_text() for t in ax.texts] == ["harness"]
    plt.close(fig)


def test_trend_plots_draw_each_nights_interval_and_say_what_it_covers(tmp_path):
    """A drop between two nights was drawn as a line alone, though each night's summary.csv (and so
    the history) held its interval: whether it was beyond noise could not be seen."""
    import matplotlib.pyplot as plt

    from harness.outputs.trend_plots import plot_trend

    store = HistoryStore(tmp_path / "history.sqlite")
    record(store, "a", "2026-11-01", {("unet", "val_iou"): 0.50, ("unet", "val_iou_low"): 0.45, ("unet", "val_iou_high"): 0.56})
    record(store, "b", "2026-11-02", {("unet", "val_iou"): 0.47, ("unet", "val_iou_low"): 0.40, ("unet", "val_iou_high"): 0.52})
    fig, ax = plt.subplots()
    plot_trend(ax, store.table(), "val_iou")
    (bars,) = [c for c in ax.containers if type(c).__name__ == "ErrorbarContainer"]
    spans = sorted(tuple(round(float(v), 2) for v in segment[:, 1]) for segment in bars.lines[2][0].get_segments())
    assert spans == [(0.4, 0.52), (0.45, 0.56)]
    assert ax.get_title().endswith("bars: each night's 95% interval, of images only (one training seed)")
    plt.close(fig)
    record(store, "c", "2026-11-03", {("unet", "val_iou"): 0.5, ("unet", "val_iou_low"): 0.4, ("unet", "val_iou_high"): 0.6, ("unet", "val_iou_std"): 0.02,
                                      ("fcn", "val_iou"): 0.3, ("fcn", "val_iou_low"): 0.2, ("fcn", "val_iou_high"): 0.4})
    fig, ax = plt.subplots()
    plot_trend(ax, store.table(), "val_iou", regressed={("unet", "c")})
    assert ax.get_title().endswith("of seeds and images on nights with repeats, images only on the others")
    lines = {line.get_label(): line for line in ax.get_lines() if line.get_label() in ("fcn", "unet")}
    assert lines["unet"].get_xdata()[-1] < 2 < lines["fcn"].get_xdata()[0]  # side by side, in the order the history first names them
    (ring,) = [c for c in ax.collections if c.get_offsets().shape == (1, 2) and len(c.get_edgecolors()) and tuple(c.get_edgecolors()[0][:3]) == (1.0, 0.0, 0.0)]
    assert tuple(ring.get_offsets()[0]) == (lines["unet"].get_xdata()[-1], 0.5)  # the regression's ring on its point
    plt.close(fig)
    fig, ax = plt.subplots()
    plot_trend(ax, store.table(), "best_val_loss")  # no interval recorded: no bars, nothing said
    assert not ax.containers and ax.get_title() == "best_val_loss across nights"
    plt.close(fig)


def test_history_of_a_metric_no_run_recorded_is_refused_with_the_recorded_ones(tmp_path):
    """`history --metric val_dice` printed the table without a metric column and said nothing."""
    store = HistoryStore(tmp_path / "results" / "tiny" / "history.sqlite")
    store.record_run(RunMeasurements(RunRecord("r1", "2026-11-20", "completed", None, None, None, None), None, None, {}, [], {},
                                     {"unet": "ok"}, {("unet", "val_iou"): 0.5, ("unet", "val_loss"): 0.7}))
    asked = run_main("history", "tiny", "--results", tmp_path / "results", "--metric", "val_dice")
    assert asked.returncode == 2 and "history --metric val_dice: no run in" in asked.stderr
    assert "did you mean 'val_iou'? (choose one of val_iou, val_loss)" in asked.stderr
    shown = run_main("history", "tiny", "--results", tmp_path / "results", "--metric", "val_iou", "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout)[0]["unet val_iou"] == 0.5


WRITER = textwrap.dedent(
    """
    import sys
    from harness.nights.history import HistoryStore, RunMeasurements, RunRecord
    store = HistoryStore(sys.argv[1])
    start = int(sys.argv[2])
    for n in range(start, start + 100000):
        metrics = {(f"model{m}", f"metric{k}"): float(n) for m in range(20) for k in range(50)}
        store.record_run(RunMeasurements(RunRecord(f"run{n:06d}", None, "completed", None, None, None, None),
                                         None, None, {}, [], {}, {f"model{m}": "ok" for m in range(20)}, metrics))
        print(n, flush=True)
    """
)


def test_history_survives_kills_mid_write(tmp_path):
    """SIGKILL a process that writes 1000-row runs back to back, five times at random moments:
    the database stays intact and every run in it is complete (1000 rows) or absent."""
    path = tmp_path / "history.sqlite"
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    rng = random.Random(0)
    start = 0
    for _ in range(5):
        writer = subprocess.Popen([sys.executable, str(script), str(path), str(start)], cwd=REPO, stdout=subprocess.PIPE, text=True)
        writer.stdout.readline()  # at least one run written: the kill lands amid later writes
        time.sleep(rng.uniform(0.0, 0.4))
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        start += 100000
    store = HistoryStore(path)
    assert store.check() == "ok"
    with sqlite3.connect(path) as conn:
        counts = dict(conn.execute("SELECT run_id, COUNT(*) FROM metrics GROUP BY run_id"))
        runs = {row[0] for row in conn.execute("SELECT run_id FROM runs")}
        model_rows = dict(conn.execute("SELECT run_id, COUNT(*) FROM models GROUP BY run_id"))
    assert len(runs) >= 5
    assert set(counts) == runs == set(model_rows)
    assert set(counts.values()) == {1000} and set(model_rows.values()) == {20}


def test_a_corrupt_history_is_named_and_left_alone(tmp_path):
    folder = tmp_path / "results" / "tiny"
    folder.mkdir(parents=True)
    (folder / "history.sqlite").write_bytes(b"not a database at all" * 100)
    result = run_main("history", "tiny", "--results", tmp_path / "results")
    assert result.returncode == 3, result.stderr
    assert "history.sqlite" in result.stderr and "Traceback" not in result.stderr
    assert (folder / "history.sqlite").read_bytes() == b"not a database at all" * 100


def test_a_missing_history_names_each_place_it_looked_once(tmp_path):
    by_name = run_main("history", "tiny", "--results", tmp_path / "results")
    assert by_name.returncode == 2 and "Traceback" not in by_name.stderr
    assert f"looked for tiny/history.sqlite and {tmp_path / 'results' / 'tiny' / 'history.sqlite'};" in by_name.stderr
    by_path = run_main("history", tmp_path / "nowhere", "--results", tmp_path / "results")  # absolute: one place
    assert by_path.returncode == 2
    assert f"looked for {tmp_path / 'nowhere' / 'history.sqlite'}; " in by_path.stderr
    (tmp_path / "results" / "tinny").mkdir(parents=True)  # an experiment with a history, named close to it
    (tmp_path / "results" / "tinny" / "history.sqlite").touch()
    close = run_main("history", "tiny", "--results", tmp_path / "results")
    assert "; did you mean 'tinny'? (experiments with a history there: tinny); `harness nightly CONFIG` creates one" in close.stderr


# ---------------------------------------------------------------------------------------------
# End to end: three nights through the real CLI

NIGHTLY_CONFIG = tiny_config(
    models=[{"name": "fcn", "arch": "tiny_fcn"}, {"name": "unet", "arch": "tiny_unet"}],
    train={"epochs": 6, "steps_per_call": 1, "checkpoint_every_steps": 2},
    output={"plot_formats": ["png"], "nightly": {"keep_checkpoints_of_runs": 1, "thresholds": {"val_iou": {"abs": 0.01}, "best_val_loss": {"rel": 0.05}}}},
)


def metric_rows(history: Path) -> int:
    with sqlite3.connect(history) as conn:
        return conn.execute("SELECT COUNT(*) FROM metrics").fetchone()[0]


def test_three_nights_kill_lock_resume_regression_pin_and_retention(tmp_path):
    config = write_yaml(tmp_path / "nightly.yaml", NIGHTLY_CONFIG)
    results = tmp_path / "results"
    experiment = results / "tiny"
    nightly = ("nightly", config, "--results", results)

    # Night 1: killed mid-run while a second nightly is refused; the rerun resumes the same run.
    first = start_cli(*nightly, "--night", "2026-11-19")
    deadline = time.monotonic() + 120
    while not list(experiment.glob("*/checkpoints/ckpt-2.index")):
        assert first.poll() is None and time.monotonic() < deadline, first.stderr.read() if first.poll() is not None else "timeout"
        time.sleep(0.05)
    # Stopped where it stands: it holds the lock, and cannot finish the night while the second
    # nightly starts up (a tiny run's last steps can take less time than a process's imports).
    first.send_signal(signal.SIGSTOP)
    second = run_cli(*nightly, "--night", "2026-11-19")
    assert second.returncode == 5, second.stderr
    assert "locked by another nightly" in second.stderr
    first.send_signal(signal.SIGKILL)
    first.wait()
    resumed = run_cli(*nightly, "--night", "2026-11-19")
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming tonight's run" in resumed.stderr
    (night1,) = [p for p in experiment.iterdir() if p.is_dir()]
    rows = metric_rows(experiment / "history.sqlite")

    # Idempotent: the same night again trains nothing and adds no rows.
    again = run_cli(*nightly, "--night", "2026-11-19")
    assert again.returncode == 0 and "already recorded" in again.stderr
    assert metric_rows(experiment / "history.sqlite") == rows
    assert len([p for p in experiment.iterdir() if p.is_dir()]) == 1

    # Night 2: a seeded regression (a learning rate too small to learn) exits 6.
    assert run_cli("history", "tiny", "--results", results, "--pin", night1.name).returncode == 0
    worse = run_cli(*nightly, "--night", "2026-11-20", "--set", "train.optimizer.learning_rate=1e-7")
    assert worse.returncode == 6, worse.stderr
    assert "regression" in worse.stderr and "REGRESSION" in worse.stdout
    night2 = max(p for p in experiment.iterdir() if p.is_dir())
    report = json.loads((night2 / "nightly.json").read_text())
    assert report["previous"] == night1.name and report["baseline"] == night1.name
    regressed = {(c["against"], c["model"], c["metric"]) for c in report["changes"] if c["regressed"]}
    assert regressed and all(metric in ("val_iou", "best_val_loss") for _, _, metric in regressed)
    assert {a for a, _, _ in regressed} == {"previous"}  # the baseline is the same run: compared once, counted once
    assert any("the baseline is the previous night's run" in note for note in report["notes"])
    # What changed, not only that something did.
    assert any(re.search(r"config changed since the previous run \(\S+\): .*train\.optimizer\.learning_rate \(every model's too\): tiny/\S+ = 0\.001, "
                         r"tiny/\S+ = 1e-07", note) for note in report["notes"]), report["notes"]

    # Night 3: back to the original config: no regression against night 2 nor the baseline.
    fine = run_cli(*nightly, "--night", "2026-11-21")
    assert fine.returncode == 0, fine.stderr + fine.stdout
    night3 = max(p for p in experiment.iterdir() if p.is_dir())
    page = (night3 / "report.html").read_text()
    assert "Nightly: changes and trends" in page and page.count("data:image/png") >= 2 + 2  # run plots + 2 trends
    assert (night3 / "plots" / "nightly" / "trend_val_iou.png").stat().st_size > 1000
    assert (experiment / "nightly.md").read_text().startswith("# tiny: night of 2026-11-21")
    assert f"{night3.name}/plots/nightly/trend_val_iou.png" in (experiment / "nightly.md").read_text()

    # Retention: only the newest run and the pinned baseline keep checkpoints; tables stay.
    assert (night3 / "checkpoints").is_dir() and (night1 / "checkpoints").is_dir()
    assert not (night2 / "checkpoints").exists()
    assert (night2 / "summary.csv").exists() and (night2 / "models").is_dir()

    shown = run_cli("history", experiment, "--csv", tmp_path / "history.csv")
    assert shown.returncode == 0, shown.stderr
    assert " *" in shown.stdout and "marked *" in shown.stdout
    table = read_csv(tmp_path / "history.csv")
    assert list(table["night"]) == ["2026-11-19", "2026-11-20", "2026-11-21"]
    assert list(table["regressions"]) == [0, len(regressed), 0]
    assert math.isclose(table["fcn val_iou"][0], table["fcn val_iou"][2])  # same code, same data: same result


@pytest.mark.slow  # three nights, each a run
def test_beyond_noise_pairs_tonight_with_the_earlier_run_on_the_same_images_or_says_why_not(tmp_path):
    watched = {"nightly": {"thresholds": {"val_iou": {"abs": 0.0, "beyond_noise": True}}}}
    config = write_yaml(tmp_path / "n.yaml", tiny_config(output={**tiny_config()["output"], **watched}))
    results = tmp_path / "results"
    assert run_main("nightly", config, "--results", results, "--night", "2026-11-19").returncode == 0
    night1 = next(p for p in (results / "tiny").iterdir() if p.is_dir())
    worse = run_main("nightly", config, "--results", results, "--night", "2026-11-20", "--set", "train.optimizer.learning_rate=1e-7")
    assert worse.returncode == 6, worse.stderr
    night2 = max(p for p in (results / "tiny").iterdir() if p.is_dir())
    changes = json.loads((night2 / "nightly.json").read_text())["changes"]
    paired = [c for c in changes if c["note"].startswith(f"paired with {night1.name} on the same images: tonight - then ")]
    assert paired and all(c["regressed"] == (not c["note"].endswith(": noise")) for c in paired)
    assert any(c["regressed"] for c in paired)
    # The earlier run's folder moved away: judged by tonight's interval alone, and said. It is
    # recorded as made with an older TensorFlow: the notes name the change.
    night2.rename(tmp_path / "moved")
    store = HistoryStore(results / "tiny" / "history.sqlite")
    older = {**store.versions_of(night2.name), "tensorflow": "2.20.0"}
    with sqlite3.connect(store.path) as conn:
        conn.execute("UPDATE runs SET versions = ? WHERE run_id = ?", (json.dumps(older), night2.name))
    assert run_main("nightly", config, "--results", results, "--night", "2026-11-21").returncode in (0, 6)
    night3 = max(p for p in (results / "tiny").iterdir() if p.is_dir())
    notes = json.loads((night3 / "nightly.json").read_text())["notes"]
    assert any(f"not paired with {night2.name}: its run folder" in n and "is gone" in n for n in notes), notes
    assert any(n.startswith(f"other versions than the previous run ({night2.name}): tensorflow 2.20.0 -> 2.21.") for n in notes), notes


def test_a_threshold_naming_no_column_says_which_it_likely_meant():
    from harness.nights.tonight import likely_column

    columns = {"val_iou", "val_f1", "best_val_loss", "ms_per_step"}
    assert likely_column("val_iuo", columns) == " (did you mean 'val_iou'?)"
    assert likely_column("coverage", columns) == ""
