"""Live progress that fits any width: step, total, elapsed always, and the time left at the pace of
the calls after the first (which traces); a bar and as many
members' losses as fit; members that left the run left out; validation scores at each evaluation;
Ctrl-C acknowledged at once, even in the middle of a long call."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap

import pytest

from harness.outputs.progress import TerminalWriter, pooled_scores, status_line
from harness.outputs.writers import Row

NAMES = [f"mine-lr0.0{i}" for i in range(6)]


def train_rows(step, names, value=1.4483):
    return [Row(step, 1, m, "train", "loss", value + i) for i, m in enumerate(names)]


def drawn(width, calls):
    stream = io.StringIO()
    writer = TerminalWriter(200, NAMES, "bar", 0, stream, width)
    for step, rows in calls:
        writer.write(rows, step)
    writer.close()
    return [line for chunk in stream.getvalue().split("\n") for line in chunk.split("\r") if line.strip()]


@pytest.mark.parametrize("width", [60, 100, 200])
def test_the_line_fits_and_always_shows_step_total_elapsed_and_time_left(width):
    lines = drawn(width, [(20, train_rows(20, NAMES)), (40, train_rows(40, NAMES))])
    line = lines[-1]
    assert len(line) <= width and line.startswith("step 40/200  ") and " left" in line
    assert "mine-lr0.00 1.4483" in line  # at least one member's loss, whole
    shown = sum(name in line for name in NAMES)
    assert shown == 6 or f"+{6 - shown} more" in line  # the rest counted, never cut mid-name
    if width >= 100:
        assert "█" in line or "░" in line  # a bar where there is room


def test_the_time_left_leaves_out_the_first_call_which_traces(monkeypatch):
    """12 sm networks: the first call (6 steps) took 199 s, nearly all tracing; the next 6 steps and a
    validation 55 s. What is left (12 steps) is about 110 s, not the 4 min that 254 s / 12 steps
    would say."""
    clock = iter([0.0, 199.0, 254.0, 364.0])
    monkeypatch.setattr("harness.outputs.progress.time.monotonic", lambda: next(clock))
    stream = io.StringIO()
    writer = TerminalWriter(24, NAMES, "lines", 0, stream)
    writer.write(train_rows(6, NAMES), 6)
    writer.write(train_rows(12, NAMES), 12)
    writer.write(train_rows(24, NAMES), 24)
    first, second, last = stream.getvalue().splitlines()
    assert first.startswith("step 6/24  3m19s  loss: ")  # no pace known yet: no guess
    assert second.startswith("step 12/24  4m14s  ~1m50s left  ")
    assert last.startswith("step 24/24  6m04s  loss: ")  # not "~0s left": the end of the run follows


def test_at_200_columns_every_member_shows_and_at_60_the_rest_are_counted():
    assert all(name in drawn(200, [(40, train_rows(40, NAMES))])[0] for name in NAMES)
    assert "+5 more" in drawn(60, [(40, train_rows(40, NAMES))])[0]


def test_members_that_left_the_run_are_not_shown():
    lines = drawn(200, [(40, train_rows(40, NAMES)), (50, train_rows(50, NAMES[:2], 0.9))])
    assert "mine-lr0.05" not in lines[-1] and "mine-lr0.01 1.9000" in lines[-1]


@pytest.mark.parametrize("width", [60, 100])
def test_validation_scores_are_printed_above_the_line_wrapped_to_the_width(width):
    val = [Row(40, 1, m, "val", metric, 0.5) for m in NAMES for metric in ("iou", "loss")]
    lines = drawn(width, [(40, train_rows(40, NAMES) + val)])
    printed = [l for l in lines if not l.startswith("step ")]
    assert printed[0].startswith("val @ step 40: mine-lr0.00 iou 0.500 loss 0.500")
    assert all(len(l) <= width for l in printed) and all(name in "\n".join(printed) for name in NAMES)


def test_log_lines_are_never_cut():
    stream = io.StringIO()
    writer = TerminalWriter(16, NAMES, "lines", 0, stream)
    writer.write(train_rows(16, NAMES), 16)
    (line,) = stream.getvalue().splitlines()
    assert line.startswith("step 16/16") and "loss: mine-lr0.00 1.4483" in line and "mine-lr0.05 6.4483" in line


def test_a_line_without_losses_yet_is_only_the_head():
    assert status_line(0, 200, 3.0, None, {}, 60).startswith("step 0/200  3s")


def test_ctrl_c_is_acknowledged_during_a_long_call_before_the_call_returns(tmp_path):
    script = tmp_path / "long_call.py"
    script.write_text(textwrap.dedent("""
        import os, signal, sys, threading
        import numpy as np
        from harness.training.controller import StopFlag

        with StopFlag(notice="a checkpoint, then exit 75") as stop:
            threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
            a = np.random.default_rng(0).random((1500, 1500))
            for _ in range(12):  # seconds in C code, where Python runs no signal handler
                a = np.linalg.inv(a @ a.T + np.eye(1500))
            print("the long call returned; flag:", stop.name, file=sys.stderr, flush=True)
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    said = done.stderr.index("harness: SIGINT received: a checkpoint, then exit 75")
    assert said < done.stderr.index("the long call returned; flag: SIGINT")


def test_ctrl_c_again_during_a_long_call_stops_at_once_but_a_forwarded_duplicate_does_not(tmp_path):
    """A second SIGINT (a user pressing Ctrl-C again) ends the process in the middle of the call,
    with 130 and what to do; two within milliseconds (a launcher forwarding the terminal's own
    SIGINT to its workers) are one request, as before: the call finishes."""
    script = tmp_path / "long_call.py"
    script.write_text(textwrap.dedent("""
        import os, signal, sys, threading
        import numpy as np
        from harness.training.controller import StopFlag

        gap = float(sys.argv[1])
        with StopFlag(notice="a checkpoint, then exit 75", at_once="stopped at once; resume continues") as stop:
            for delay in (0.3, 0.3 + gap):
                threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT)).start()
            a = np.random.default_rng(0).random((1500, 1500))
            for _ in range(12):  # seconds in C code, where Python runs no signal handler
                a = np.linalg.inv(a @ a.T + np.eye(1500))
            print("the long call returned; flag:", stop.name, file=sys.stderr, flush=True)
    """))
    again = subprocess.run([sys.executable, str(script), "0.6"], capture_output=True, text=True, timeout=300)
    assert again.returncode == 130, again.stderr
    assert "harness: SIGINT again: stopped at once; resume continues" in again.stderr and "the long call returned" not in again.stderr
    forwarded = subprocess.run([sys.executable, str(script), "0.01"], capture_output=True, text=True, timeout=300)
    assert forwarded.returncode == 0 and "the long call returned; flag: SIGINT" in forwarded.stderr, forwarded.stderr
    assert "SIGINT again" not in forwarded.stderr


def test_a_models_seeds_are_one_entry_with_their_mean_and_range():
    """smoke with train.repeats: 20 printed 60 members' scores at each validation, 1,500 characters"""
    seeds = [f"{model}@{r}" for model in ("fcn", "unet") for r in range(1, 21)]
    stream = io.StringIO()
    writer = TerminalWriter(40, seeds, "lines", 0, stream)
    val = [Row(40, 1, m, "val", metric, (0.3 if m.startswith("fcn") else 0.5) + 0.01 * i) for i, m in enumerate(seeds)
           for metric in ("iou", "loss")]
    writer.write(train_rows(40, seeds, 1.0), 40)
    writer.write(train_rows(40, seeds[:3] + seeds[4:20] + seeds[20:], 1.0) + val, 40)  # fcn@4 left the run
    first, scores, last = stream.getvalue().splitlines()
    assert first.startswith("step 40/40  ") and first.endswith("mean loss: fcn@1-20 10.5000  unet@1-20 30.5000")
    assert scores == ("val @ step 40, each model's mean over its seeds: fcn@1-20 iou 0.395 (seeds 0.300-0.490) loss 0.395 | "
                      "unet@1-20 iou 0.795 (seeds 0.700-0.890) loss 0.795")
    assert "fcn@1-3,5-20 " in last and "mine" not in last


def test_small_scores_keep_three_significant_digits():
    """autoencoders.yaml's MSE: 0.0120 and 0.0094 were printed as 0.012 and 0.009, and a model's
    seeds' range as 0.012-0.012"""
    scores = pooled_scores({"ae@1": {"loss": 0.01204}, "ae@2": {"loss": 0.00943}, "unet": {"iou": 0.4655, "loss": 1.2345}})
    assert scores == {"ae@1-2": {"loss": "0.0107 (seeds 0.00943-0.0120)"}, "unet": {"iou": "0.466", "loss": "1.234"}}


def test_a_seed_that_is_not_finite_is_counted_apart_not_averaged():
    nan = float("nan")
    scores = pooled_scores({"u@1": {"iou": 0.5, "loss": nan}, "u@2": {"iou": nan, "loss": 1.0}, "u@3": {"iou": 0.4, "loss": 1.2}, "x": {"iou": nan}})
    assert scores == {"u@1-3": {"iou": "0.450 (seeds 0.400-0.500; 1 of 3 not finite)", "loss": "1.100 (1 of 3 not finite)"}, "x": {"iou": "nan"}}
