"""Learning-rate schedules: the formulas, the config (steps or epochs, a train-level default), the
`lr` rows of a run, and resume continuing the very same curve, bit for bit."""

from __future__ import annotations

import math
import signal

import numpy as np
import pytest
from conftest import assert_same_training, only_run_dir, run_cli, start_cli, tiny_config, wait_for_rows, wait_for_run_dir, write_yaml

from harness.config.loading import validate_config
from harness.config.schema import ScheduleSpec
from harness.core.schedules import WarmupSchedule
from harness.errors import ConfigError
from harness.rundir import read_csv


def rates(schedule, steps) -> np.ndarray:
    return np.array([float(schedule(t)) for t in steps])


def test_cosine_with_warmup_and_a_floor():
    schedule = WarmupSchedule(0.1, "cosine", warmup_steps=4, decay_steps=10, floor=0.1)
    assert rates(schedule, range(4)) == pytest.approx([0.025, 0.05, 0.075, 0.1])
    expected = [0.1 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * u / 10))) for u in range(11)]
    assert rates(schedule, range(4, 15)) == pytest.approx(expected, rel=1e-6)
    assert float(schedule(100)) == pytest.approx(0.01)  # the floor after the decay


def test_polynomial_and_piecewise_and_constant():
    poly = WarmupSchedule(1.0, "polynomial", decay_steps=8, power=0.9)
    assert rates(poly, [0, 4, 8, 20]) == pytest.approx([1.0, 0.5**0.9, 0.0, 0.0], abs=1e-6)
    steps = WarmupSchedule(1.0, "piecewise", boundaries=(3, 6), factors=(0.1, 0.5))
    assert rates(steps, [0, 2, 3, 5, 6, 9]) == pytest.approx([1, 1, 0.1, 0.1, 0.05, 0.05])
    assert rates(WarmupSchedule(0.3), [0, 50]) == pytest.approx([0.3, 0.3])


def test_epochs_become_steps_and_the_train_schedule_is_every_members_default():
    raw = tiny_config(train={"optimizer": {"name": "adam", "learning_rate": 0.01, "schedule": {"name": "cosine", "warmup_epochs": 0.5}}})
    raw["models"][1]["optimizer"] = {"name": "sgd", "learning_rate": 0.1, "schedule": {"name": "piecewise", "boundaries_epochs": [1], "factors": [0.1]}}
    config = validate_config(raw)
    fcn, unet, deconv = config.models
    assert fcn.optimizer.schedule.name == "cosine" and deconv.optimizer.schedule.name == "cosine"  # deconv's own optimizer, the train schedule
    assert unet.optimizer.schedule.name == "piecewise"
    in_steps = config.optimizer_in_steps(fcn.optimizer).schedule  # 4 steps per epoch, 8 in all
    assert (in_steps.warmup_steps, in_steps.decay_steps, in_steps.warmup_epochs) == (2, 6, None)
    assert config.optimizer_in_steps(unet.optimizer).schedule.boundaries_steps == [4]


@pytest.mark.parametrize(
    "schedule, expected",
    [
        ({"name": "cosine", "warmup_steps": 2, "warmup_epochs": 1}, "warmup_steps or warmup_epochs, not both"),
        ({"name": "piecewise", "boundaries_steps": [2, 4], "factors": [0.1]}, "one factor per boundary"),
        ({"name": "piecewise", "boundaries_steps": [4, 2], "factors": [0.1, 0.1]}, "boundaries must increase"),
        ({"name": "linear"}, "train.optimizer.schedule.name"),
    ],
)
def test_a_bad_schedule_is_named(schedule, expected):
    with pytest.raises(ConfigError) as info:
        validate_config(tiny_config(train={"optimizer": {"schedule": schedule}}))
    assert expected in info.value.render()


def test_schedule_spec_defaults_decay_to_the_rest_of_the_run():
    assert ScheduleSpec(name="cosine", warmup_steps=3).in_steps(10, 50).decay_steps == 47


SCHEDULED = tiny_config(
    train={"epochs": 3, "steps_per_call": 1, "checkpoint_every_steps": 2,
           "optimizer": {"name": "adam", "learning_rate": 0.01, "schedule": {"name": "cosine", "warmup_steps": 3, "floor": 0.1}}},
    output={"progress": "lines", "plot_formats": ["png"]},
)


@pytest.fixture(scope="module")
def scheduled_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("scheduled")
    done = run_cli("run", write_yaml(folder / "c.yaml", SCHEDULED), "--results", folder / "r")
    assert done.returncode == 0, done.stderr
    return only_run_dir(folder / "r")


def test_every_members_learning_rate_is_a_train_row_and_a_plot(scheduled_run):
    rows = read_csv(scheduled_run / "losses.csv")
    lr = rows[(rows["metric"] == "lr") & (rows["split"] == "train")]
    assert set(lr["model"]) == {"fcn", "unet", "deconv"}
    fcn = lr[lr["model"] == "fcn"].sort_values("step")["value"].to_numpy()
    expected = rates(WarmupSchedule(0.01, "cosine", warmup_steps=3, decay_steps=12 - 3, floor=0.1), range(12))
    assert fcn == pytest.approx(expected, rel=1e-6)  # row of step s: the rate its update used
    deconv = lr[lr["model"] == "deconv"].sort_values("step")["value"].to_numpy()
    assert deconv[3] == pytest.approx(0.05)  # deconv's own sgd at 0.05, the same train-level schedule
    assert (scheduled_run / "plots" / "learning_rates.png").stat().st_size > 1000


def test_a_scheduled_run_interrupted_and_resumed_equals_the_uninterrupted_one(scheduled_run, tmp_path):
    results = tmp_path / "r"
    process = start_cli("run", write_yaml(tmp_path / "c.yaml", SCHEDULED), "--results", results)
    run_dir = wait_for_run_dir(results, process)
    assert wait_for_rows(run_dir / "losses.csv", 3 * 2 * 5, process=process), "finished before it could be stopped"
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=120)
    assert process.returncode == 75
    done = run_cli("resume", run_dir)
    assert done.returncode == 0, done.stderr
    assert_same_training(run_dir, scheduled_run)
