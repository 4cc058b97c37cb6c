"""The outer loop and the CLI's error mapping, with fakes: no model, no TensorFlow step."""

from __future__ import annotations

import functools
import operator
import os
import signal

import pytest
from conftest import REPO

from harness import api, cli
from harness.errors import ConfigError, DataError, Interrupted, LockedError, ResourceError
from harness.outputs.writers import Row
from harness.training.controller import Controller, Schedule, StopFlag


class RecordingWriter:
    def __init__(self):
        self.calls: list[tuple[int, list[Row]]] = []

    def write(self, rows, step):
        self.calls.append((step, list(rows)))


def fake_controller(schedule: Schedule, stop: StopFlag | None = None, on_train=None):
    events: list[tuple[str, int]] = []

    def train(step, k):
        events.append(("train", step + k))
        if on_train:
            on_train(step + k)
        return [Row(s, schedule.epoch_of(s), "m", "train", "loss", 1.0 / s) for s in range(step + 1, step + k + 1)]

    def evaluate(step):
        events.append(("validate", step))
        return [Row(step, schedule.epoch_of(step), "m", "val", "loss", 0.5)]

    writer = RecordingWriter()
    controller = Controller(
        schedule=schedule,
        train=train,
        evaluate=evaluate,
        checkpoint=lambda step: events.append(("checkpoint", step)),
        writer=writer,
        after_call=lambda step: events.append(("record", step)),
        stop=stop or StopFlag(),
    )
    return controller, events, writer


def test_calls_end_at_epochs_and_checkpoints_and_every_step_is_written_once():
    schedule = Schedule(total_steps=10, steps_per_call=3, steps_per_epoch=4, checkpoint_every=5)
    controller, events, writer = fake_controller(schedule)
    assert controller.run(0) == 10
    assert [s for kind, s in events if kind == "train"] == [3, 4, 5, 8, 10]
    assert [s for kind, s in events if kind == "validate"] == [4, 8, 10]  # epoch ends and the last step
    assert [s for kind, s in events if kind == "checkpoint"] == [5, 10]
    steps = [r.step for _, rows in writer.calls for r in rows if r.split == "train"]
    assert steps == list(range(1, 11))
    assert all(r.epoch == (r.step - 1) // 4 + 1 for _, rows in writer.calls for r in rows)


def test_resumed_loop_starts_at_the_restored_step():
    schedule = Schedule(total_steps=8, steps_per_call=10, steps_per_epoch=4, checkpoint_every=4)
    controller, events, _ = fake_controller(schedule)
    assert controller.run(4) == 8
    assert events == [("train", 8), ("validate", 8), ("checkpoint", 8), ("record", 8)]


def test_a_stop_signal_checkpoints_at_the_end_of_the_call_and_stops():
    schedule = Schedule(total_steps=20, steps_per_call=2, steps_per_epoch=10, checkpoint_every=10)
    stop = StopFlag()
    controller, events, writer = fake_controller(schedule, stop, on_train=lambda step: step == 4 and stop.request(signal.SIGTERM))
    assert controller.run(0) == 4
    assert ("checkpoint", 4) in events and events[-1] == ("record", 4)  # saved before stopping
    assert max(step for step, _ in writer.calls) == 4 and stop.name == "SIGTERM"


def test_stop_flag_catches_sigterm_and_restores_the_previous_handler():
    previous = signal.getsignal(signal.SIGTERM)
    with StopFlag() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.signal == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is previous


@pytest.mark.parametrize(
    "error, code",
    [
        (ConfigError("bad", ["models.0.arch: unknown"]), 2),
        (DataError("bad data", ["a.png: does not decode"]), 3),
        (ResourceError("disk full while writing x"), 4),
        (LockedError("locked by pid 1"), 5),
        (Interrupted("stopped by SIGTERM"), 75),
    ],
)
def test_errors_map_to_the_contract_exit_codes(monkeypatch, capsys, error, code):
    def failing_run(*args, **kwargs):
        raise error

    monkeypatch.setattr(api, "run", failing_run)
    assert cli.main(["run", str(REPO / "experiments" / "smoke.yaml")]) == code
    err = capsys.readouterr().err
    assert err.startswith(f"harness: {error}") and "Traceback" not in err
    assert all(problem in err for problem in error.problems)


def test_a_bug_is_exit_1_with_a_short_message(monkeypatch, capsys, crash_report):
    # Raised with no frame outside harness, as harness's own code would (a function written in this
    # file would count as the user's code: tests/test_user_code.py).
    monkeypatch.setattr(api, "run", functools.partial(operator.getitem, {}))
    assert cli.main(["run", str(REPO / "experiments" / "smoke.yaml")]) == 1
    err = capsys.readouterr().err
    assert "internal error (TypeError: " in err and "report it" in err and "Traceback" not in err
    crash = crash_report()  # the traceback kept where the message says
    assert str(crash) in err and "Traceback" in crash.read_text()
