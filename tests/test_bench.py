"""The benchmark in its tiny mode: it runs and writes its table. Not a timed test: no assertion
on speed, only that every figure was measured."""

from __future__ import annotations

import json
import os

import pytest

import pandas as pd
from conftest import run_cli

from harness.rundir import read_csv


def test_tiny_bench_measures_every_section(tmp_path):
    result = run_cli("bench", "--tiny", "--out", tmp_path, timeout=900)
    assert result.returncode == 0, result.stderr
    (day,) = tmp_path.iterdir()
    table = read_csv(day / "bench.csv")
    assert json.loads((day / "machine.json").read_text())["cpus"] == os.cpu_count()  # whose milliseconds these are
    sections = ["loop", "overhead", "dispatch", "fit", "pipeline", "compile", "scaling", "memory", "placement", "checkpoint", "input", "statistics", "stream", "scale"]
    assert list(dict.fromkeys(table["section"])) == sections
    statistics = table[table["section"] == "statistics"]
    assert (statistics["seconds"] > 0).all() and statistics["pairs"].tolist() == [15, 15]  # 6 members
    loop = table[table["section"] == "loop"].set_index("contender")
    assert list(loop.index) == ["hand_loop", "harness_k1", "harness_k1_no_isolation", "harness_k10", "harness_k10_switched"]
    assert loop.loc["hand_loop", "ratio"] == 1.0 and (loop["median_ms_per_step"] > 0).all()
    overhead = table[table["section"] == "overhead"]
    assert overhead["contender"].tolist() == [
        "hand_loop", "hand_loop_again", "hand_fragment_batch_inside", "member_fragment_batch_inside",
        "harness_k1", "harness_k1_graph_loop", "harness_k1_one_device_strategy",
    ]
    assert (overhead["median_ms_per_step"] > 0).all()
    dispatch = table[table["section"] == "dispatch"].set_index("contender")
    assert dispatch.loc["hand_loop", "extra_ms_per_call"] == 0 and dispatch["extra_ms_per_call"].notna().all()
    fit = table[table["section"] == "fit"].set_index("contender")
    assert (fit["end_to_end_s"] > 0).all() and (fit["end_to_end_ratio"] > 0).all()
    saving = table[(table["section"] == "pipeline") & (table["contender"] == "saving_measured_vs_predicted")].iloc[0]
    assert saving["pipeline_ms_per_batch"] > 0 and saving["predicted_saving_ms_per_step"] > 0
    assert table[table["section"] == "scaling"]["contender"].tolist() == ["N=1", "N=2"]
    memory = table[table["section"] == "memory"]
    assert (memory["rss_mb"] > 100).all() and memory["model_rss_mb"].notna().all()
    placement = table[table["section"] == "placement"]
    assert placement["contender"].tolist() == ["one_device", "mirrored", "per_model"]
    assert table[table["section"] == "checkpoint"].iloc[0]["save_ms"] > 0
    wait = table[table["section"] == "input"].set_index("contender")
    assert list(wait.index) == ["suite pipeline", "expensive pipeline"]
    assert ((wait["ratio"] >= 0) & (wait["ratio"] < 1)).all() and (wait["in_memory_ms_per_step"] > 0).all()
    stream = table[table["section"] == "stream"].set_index("contender")
    assert stream.loc["streamed, store written", "decoded"] == 60 and stream.loc["streamed, store reused", "decoded"] == 0
    assert (stream["peak_rss_mb"].dropna() > 100).all() and (stream["scan_pairs_per_s"].dropna() > 0).all()
    assert stream.loc["format: pread of fixed-size records (the store)", "reads_per_s"] > 0
    assert stream.loc["format: pread + CRC-32 check of each record (the store as it reads)", "reads_per_s"] > 0
    assert stream.loc["checksum cost: share of the streamed images/s", "share_of_streamed_images_per_s"] >= 0
    shares = stream[stream.index.str.startswith("input share")]
    assert [name.split(": ")[-1] for name in shares.index] == ["held in memory", "streamed"]
    assert ((shares["ratio"] >= 0) & (shares["ratio"] <= shares["share_high"])).all() and (shares["in_memory_ms_per_step"] > 0).all()
    scale = table[table["section"] == "scale"].set_index("contender")
    assert list(scale.index[:2]) == ["one group", "2 single runs"] and (scale["end_to_end_s"].iloc[:2] > 0).all()
    assert scale.loc["one group", "ratio"] == 1.0 and (scale["peak_rss_mb"].iloc[:2] > 100).all()
    accuracy = scale[scale.index.str.startswith("plan accuracy")]
    assert len(accuracy) == 2 and (accuracy["predicted_mb"] > 0).all() and (accuracy["measured_mb"] > 0).all()
    assert (day / "bench.png").exists() and (day / "bench_ratios.png").exists()
    assert "== loop ==" in result.stdout and f"bench.csv and its plots: {day}" in result.stdout


def test_processes_are_merged_by_median_and_every_process_is_kept(tmp_path):
    # The checkpoint section: the cheapest with a timed figure and a ratio (the merge is the same for all).
    result = run_cli("bench", "--tiny", "--section", "checkpoint", "--processes", "2", "--out", tmp_path, timeout=900)
    assert result.returncode == 0, result.stderr
    (day,) = tmp_path.iterdir()
    every = read_csv(day / "bench_processes.csv")
    assert sorted(every["process"].unique()) == [1, 2] and len(every) == 2 * 1  # one checkpoint row each
    assert json.loads((day / "machine.json").read_text())["cpus"] == os.cpu_count()
    merged = read_csv(day / "bench.csv").set_index("contender")
    for name, rows in every.groupby("contender"):
        assert merged.loc[name, "save_ms"] == rows["save_ms"].median()
        assert merged.loc[name, "ratio_min"] == rows["ratio"].min() and merged.loc[name, "processes"] == 2
    assert not list(day.glob(".process-*")), "scratch folders of the processes are removed"


def test_bootstrap_interval_holds_the_median_and_narrows_with_more_rounds():
    import numpy as np

    from harness.bench.timing import bootstrap_median_interval

    rng = np.random.default_rng(1)
    few, many = rng.normal(1.0, 0.05, 10), rng.normal(1.0, 0.05, 400)
    low, high = bootstrap_median_interval(few)
    assert low <= np.median(few) <= high
    low_many, high_many = bootstrap_median_interval(many)
    assert high_many - low_many < high - low
    assert bootstrap_median_interval([1.0] * 5) == (1.0, 1.0)


@pytest.mark.slow
def test_gpu_section_runs_its_contenders_on_logical_cpus():
    # No GPU here: the same contenders on the two logical CPUs check the section works.
    from harness.bench.sections import bench_gpu
    from harness.bench.suites import TINY
    from harness.core.backend import import_keras

    table = bench_gpu(TINY, rounds=1, steps=1, kind="CPU").set_index("contender")
    assert list(table.index) == ["float32", "mixed_float16", "xla", "mirrored", "per_model"]
    assert table.loc["xla", "xla_models"] == "fcn"  # tiny_unet's upsampling has no XLA gradient on CPU
    assert (table["median_ms_per_step"] > 0).all() and (table["trace_s"] > 0).all()
    assert import_keras().mixed_precision.global_policy().name == "float32"  # restored


def test_the_fixed_section_times_each_phase_of_a_whole_command_against_the_hand_loop(tmp_path):
    # With output processes, as a user's command runs (the suite's default leaves them out).
    result = run_cli("bench", "--tiny", "--section", "fixed", "--out", tmp_path, timeout=900, env={"HARNESS_OUTPUT_PROCESSES": ""})
    assert result.returncode == 0, result.stderr
    (csv,) = tmp_path.glob("*/bench.csv")
    table = read_csv(csv).set_index("phase")
    for phase in ("imports and config", "build", "first_call", "first_validation", "steady_steps", "best_weights", "end: write_tables", "tail (last line to exit)", "end to end"):
        assert table.loc[phase, "harness_s"] >= 0, phase
    assert table.loc["best_weights", "harness_s"] > 0  # smoke's members improve at the first evaluation at least
    # The phases account for the whole command: nothing the run does falls between them.
    parts = table.drop(["end to end", "end-of-run actions"])["harness_s"].sum()
    assert abs(parts - table.loc["end to end", "harness_s"]) < 0.01 * table.loc["end to end", "harness_s"]
    for phase in ("imports and config", "build", "first_call", "first_validation", "steady_steps", "end to end"):
        assert table.loc[phase, "hand_loop_s"] > 0, phase
    end_to_end = table.loc["end to end"]
    # One round: its ratio is harness over the hand loop. Both seconds and the ratio are written to
    # 3 decimals, so the quotient of the written seconds may differ in the last digit (1.73 against
    # 10.939 / 6.325 = 1.7295: the unrounded seconds gave 1.7296).
    assert end_to_end["ratio"] == pytest.approx(end_to_end["harness_s"] / end_to_end["hand_loop_s"], abs=0.001)


def test_the_fixed_sections_ratio_pairs_each_round_and_shows_their_range():
    """Each round's two commands ran side by side: the ratio is the median of the rounds' own, not
    the ratio of two medians taken from different rounds."""
    from harness.bench.fixed import _rows

    harness = [{"end to end": s} for s in (10.0, 12.0, 20.0)]
    hand = [{"end to end": s} for s in (8.0, 6.0, 16.0)]  # a hiccup in the hand loop's 2nd round
    (row,) = _rows("smoke", {"harness": harness, "hand_loop": hand})
    assert (row["harness_s"], row["hand_loop_s"]) == (12.0, 8.0)  # the medians, as every phase's
    assert row["ratio"] == 1.25 and row["ratio_range"] == "1.25-2.00"  # 12 / 8 would read 1.5
    (alone,) = _rows("grid40", {"harness": harness, "hand_loop": []})
    assert "ratio" not in alone
    (one,) = _rows("smoke", {"harness": harness[:1], "hand_loop": hand[:1]})
    assert one["ratio"] == 1.25 and "ratio_range" not in one


def test_the_printed_bench_is_one_table_per_section_with_only_its_own_columns():
    """bench.csv is one table of every section's columns; printed whole it was about 40 columns of
    NaN a row, too wide for any terminal."""
    from harness.bench.bench import bench_text

    table = pd.DataFrame([{"section": "loop", "contender": "hand_loop", "ratio": 1.0, "trace_s": 1.58, "goal": None},
                          {"section": "loop", "contender": "harness_k1", "ratio": 0.88694, "trace_s": 1.65, "goal": "ratio <= 1.02"},
                          {"section": "memory", "contender": "N=1", "rss_mb": 641.6}])
    table.attrs["folder"] = "/out/2026-11-27"
    text = bench_text(table)
    loop, memory, where = text.split("\n\n")
    assert loop.splitlines()[0] == "== loop ==" and "rss_mb" not in loop and "0.8869" in loop and loop.splitlines()[2].rstrip().endswith(" -")
    assert memory.splitlines()[0] == "== memory ==" and "trace_s" not in memory and "goal" not in memory and "641.6" in memory
    assert where == "bench.csv and its plots: /out/2026-11-27 (machine.json: where they were measured)"


def test_the_switched_loop_contender_puts_each_member_behind_its_switch_as_a_run_does(monkeypatch):
    """`harness_k10_switched` measures the step a run on one replica builds: each member behind a
    switch (its first call traces 4-5 s longer on the quickstart's networks: docs/benchmarks.md)."""
    import harness.core.step as step_module
    from harness.bench.contenders import _fused_loop
    from harness.bench.suites import TINY
    from harness.bench.timing import _with

    switched, real = [], step_module.switched
    monkeypatch.setattr(step_module, "switched", lambda fragment, switch, names: switched.append(switch.name) or real(fragment, switch, names))
    _fused_loop(_with(TINY), 2)
    assert switched == []
    _fused_loop(_with(TINY), 2, switched=True)
    assert switched == ["switch_0:0", "switch_1:0"]


def test_a_fed_contender_runs_exactly_the_steps_it_is_timed_for():
    """Its ms per step is the call's time over n: a ten-step contender asked for 2 steps ran 10."""
    from harness.bench.contenders import _fed
    from harness.core.backend import import_tf

    tf = import_tf()
    chunks = []
    contender = _fed("k10", lambda iterator, k: chunks.append(k) or {"loss": tf.zeros([k])}, iter(()), 10)
    assert chunks == [10]  # the first call, timed apart
    for steps, expected in ((2, [2]), (10, [10]), (25, [10, 10, 5])):
        chunks.clear()
        contender.call(steps)
        assert chunks == expected and sum(chunks) == steps


def test_the_trace_section_rotates_its_contenders_and_pairs_each_round_with_the_hand_loop_of_that_round(monkeypatch):
    """Medians over fresh processes (faked here), and each trace's ratio to the hand loop's in the
    same round: the machine's speed moves between rounds more than between contenders."""
    import harness.bench.trace as trace

    traces = {"hand_loop": [10.0, 20.0, 12.0], "harness_k10_switched": [15.0, 22.0, 12.0]}
    seen = []

    def fake(suite, name):
        seen.append(name)
        steps = trace.CONTENDERS[name][0]
        t = traces[name][sum(n == name for n in seen) - 1]
        return {"steps_per_call": steps, "first_call_s": t + steps, "second_call_s": float(steps), "trace_s": t}

    monkeypatch.setattr(trace, "_in_fresh_process", fake)
    table = trace.bench_trace("tiny", rounds=3, contenders=list(traces)).set_index("contender")
    assert seen == ["hand_loop", "harness_k10_switched", "harness_k10_switched", "hand_loop", "hand_loop", "harness_k10_switched"]
    row = table.loc["harness_k10_switched"]
    assert row["trace_s"] == 15.0 and (row["trace_s_min"], row["trace_s_max"]) == (12.0, 22.0) and row["rounds"] == 3
    assert row["trace_ratio"] == 1.1  # 1.5, 1.1, 1.0 paired by round; the medians' ratio would be 1.25
    assert row["first_call_s"] == 25.0 and row["steps_per_call"] == 10 and table.loc["hand_loop", "trace_ratio"] == 1.0


@pytest.mark.slow
def test_the_trace_section_times_a_first_call_in_a_fresh_process():
    from harness.bench.trace import bench_trace

    (row,) = bench_trace("tiny", rounds=1, contenders=["harness_k10_switched"]).to_dict("records")
    assert row["section"] == "trace" and row["steps_per_call"] == 10 and row["second_call_s"] > 0
    assert row["first_call_s"] > row["second_call_s"]  # the first call traces
    assert abs(row["trace_s"] - (row["first_call_s"] - row["second_call_s"])) < 0.02 and "trace_ratio" not in row


def test_the_bench_has_a_thunk_for_every_section_name_and_no_other(tmp_path):
    from harness.bench.bench import _sections
    from harness.bench.suites import DEFAULT_SECTIONS, ON_REQUEST_SECTIONS, SECTIONS

    assert SECTIONS == DEFAULT_SECTIONS + ON_REQUEST_SECTIONS
    assert tuple(_sections("tiny", tmp_path, None, None)) == DEFAULT_SECTIONS + ON_REQUEST_SECTIONS


def test_the_serving_section_times_both_orders_of_the_latency_calls_for_every_pair():
    from harness.bench.serving import bench_serving
    from harness.bench.suites import STANDARD

    table = bench_serving(STANDARD, probes=3, calls=4).set_index("contender")
    pairs = ["unet / deconv", "unet / fcn", "deconv / fcn"]
    assert list(table.index) == [f"{order}: {pair}" for order in ("one after another", "interleaved") for pair in pairs]
    assert (table["ratio_low"] <= table["median_ratio"]).all() and (table["median_ratio"] <= table["ratio_high"]).all()
    assert (table["ratio_low"] > 0).all() and table["order_flips"].between(0, 1).all() and (table["probes"] == 3).all()
