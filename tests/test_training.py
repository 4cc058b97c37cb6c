"""The fused step: one trace, each model learning exactly what it learns alone, divergence isolated."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest
from conftest import Killed, saved_members, tiny_config
from reference import train_alone

from harness.api import run
from harness.config.loading import validate_config
from harness.errors import ConfigError
from harness.training.controller import Schedule
from harness.rundir import read_csv


def train_losses(result, name: str) -> list[float]:
    rows = result.losses.query("model == @name and split == 'train' and metric == 'loss'")
    return rows.sort_values("step")["value"].tolist()


def assert_same_weights(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """Three tiny architectures trained together, deterministic mode; shared by several tests."""
    config = validate_config(tiny_config(train={"epochs": 3, "steps_per_call": 5}))
    return run(config, results_dir=tmp_path_factory.mktemp("results"))


@pytest.mark.slow
def test_traced_once_despite_calls_of_different_length(tiny_run):
    # 12 steps, 4 per epoch, 5 per call: calls of 4 steps (cut at epoch ends); still one trace.
    assert tiny_run.info["trace_count"] == 1
    assert tiny_run.info["steps_done"] == 12


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fcn", "unet", "deconv"])
def test_trained_together_equals_trained_alone_bitwise(tiny_run, name):
    losses, weights = train_alone(tiny_run.config, name)
    assert train_losses(tiny_run, name) == losses  # exact float equality, every step
    assert_same_weights(tiny_run.models[name].get_weights(), weights)


@pytest.mark.slow
def test_losses_table_is_tidy_and_complete(tiny_run):
    losses = tiny_run.losses
    assert list(losses.columns) == ["step", "epoch", "model", "split", "metric", "value"]
    assert not losses.duplicated(["model", "split", "metric", "step"]).any()
    train = losses[losses["split"] == "train"]
    assert sorted(train["step"].unique()) == list(range(1, 13))
    assert set(train["epoch"]) == {1, 2, 3}
    val = losses[losses["split"] == "val"]
    assert sorted(val["step"].unique()) == [4, 8, 12]  # every epoch, the last one being the end
    assert set(val["metric"]) == {"loss", "iou", "f1", "compare_loss"}  # deconv trains on focal+dice: the common loss too
    assert val["value"].between(0, 10).all()


@pytest.mark.slow
def test_run_directory_files(tiny_run):
    run_dir = tiny_run.run_dir
    for name in ("config.yaml", "run.json", "losses.csv", "summary.csv"):
        assert (run_dir / name).is_file(), name
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "completed" and info["ended"]
    assert set(info["versions"]) >= {"python", "tensorflow", "tf_keras", "segmentation_models", "harness"}
    assert info["placement"]["strategy"] == "one_device"
    assert info["hardware"]["cpus"] == os.cpu_count() and info["hardware"]["gpus"] == [] and info["hardware"]["cpu"]  # whose timings these are
    assert isinstance(info["hardware"]["cpu_isa"], list)  # Linux names its instruction sets
    assert info["models"]["fcn"]["status"] == "ok"
    summary = read_csv(run_dir / "summary.csv")
    for column in ("model", "params", "status", "steps", "final_train_loss", "best_val_loss", "best_step", "ms_per_step", "val_iou", "val_f1"):
        assert column in summary.columns, column
    assert sorted(summary["model"]) == ["deconv", "fcn", "unet"]
    assert summary["rank"].tolist() == [1, 2, 3] and summary["val_iou"].is_monotonic_decreasing
    assert (summary["params"] > 0).all() and (summary["steps"] == 12).all()


@pytest.mark.slow
def test_a_model_alone_in_harness_equals_the_same_model_among_others(tiny_run, tmp_path):
    raw = tiny_config(train={"epochs": 3, "steps_per_call": 5})
    raw["models"] = [m for m in raw["models"] if m["name"] == "unet"]
    alone = run(validate_config(raw), results_dir=tmp_path)
    assert train_losses(alone, "unet") == train_losses(tiny_run, "unet")
    assert_same_weights(alone.models["unet"].get_weights(), tiny_run.models["unet"].get_weights())


@pytest.mark.slow
def test_one_step_per_call_form_equals_the_graph_loop_bitwise(tiny_run, tmp_path):
    # steps_per_call 1 compiles one step without a graph loop around it: same ops, same results.
    raw = tiny_config(train={"epochs": 3, "steps_per_call": 1})
    single = run(validate_config(raw), results_dir=tmp_path)
    assert single.info["trace_count"] == 1 and single.info["steps_done"] == 12
    for name in ("fcn", "unet", "deconv"):
        assert train_losses(single, name) == train_losses(tiny_run, name)
        assert_same_weights(single.models[name].get_weights(), tiny_run.models[name].get_weights())


@pytest.mark.slow
def test_diverging_model_is_skipped_and_others_are_untouched(tiny_run, tmp_path):
    # With plots: a diverged model's pairs have no metric, which the pair figure once crashed on.
    raw = tiny_config(train={"epochs": 3, "steps_per_call": 5}, output={"plot_formats": ["png"]})
    raw["models"].insert(1, {"name": "boom", "arch": "factories:nan_after", "options": {"n": 6}})
    result = run(validate_config(raw), results_dir=tmp_path)
    assert (result.run_dir / "plots" / "pair_differences.png").is_file()

    facts = result.info["models"]["boom"]
    assert facts["status"] == "diverged" and facts["changed_at_step"] == 6
    summary = result.summary.set_index("model")
    assert summary.loc["boom", "status"] == "diverged"
    assert summary.loc["boom", "diverged_step"] == 6
    assert result.info["status"] == "completed"
    boom = result.losses.query("model == 'boom'")
    assert boom["step"].max() == 6, "no rows after the model froze"
    assert np.isnan(boom.query("step == 6 and metric == 'loss'")["value"]).all()
    # validated after epoch 1 (steps 1-4) only: loss, iou, f1 (and the common loss) from before it broke
    assert boom.query("split == 'val'")["step"].tolist() == [4] * len(set(boom.query("split == 'val'")["metric"]))
    assert set(boom.query("split == 'val'")["metric"]) >= {"loss", "iou", "f1"}
    for name in ("fcn", "unet", "deconv"):
        assert train_losses(result, name) == train_losses(tiny_run, name)
        assert_same_weights(result.models[name].get_weights(), tiny_run.models[name].get_weights())


@pytest.mark.slow
def test_a_diverged_member_is_switched_off_and_a_resume_after_it_ends_as_the_uninterrupted_run(tmp_path, monkeypatch):
    import harness
    from harness.training import checkpoints as ckpt

    raw = tiny_config(train={"epochs": 3, "steps_per_call": 5})
    raw["models"].insert(1, {"name": "boom", "arch": "factories:nan_after", "options": {"n": 6}})
    whole = run(validate_config(raw), results_dir=tmp_path / "whole")
    # boom diverged at step 6, in the call of steps 5-8, and was switched off after it: written
    # once to left/ and left out of the checkpoints from step 8 on.
    folder = whole.run_dir / "checkpoints"
    assert saved_members(folder / "ckpt-4") == {0, 1, 2, 3} and saved_members(folder / "ckpt-12") == {0, 2, 3}
    assert sorted(p.name for p in (folder / "left").iterdir()) == ["member-1"]
    real_save = ckpt.save

    def killed_at_12(checkpoint, directory, step):
        if step == 12:
            raise Killed
        real_save(checkpoint, directory, step)

    with monkeypatch.context() as patch:
        patch.setattr(ckpt, "save", killed_at_12)
        with pytest.raises(Killed):
            run(validate_config(raw), results_dir=tmp_path / "killed")
    (run_dir,) = (tmp_path / "killed" / "tiny").iterdir()
    resumed = harness.resume(run_dir)  # boom from left/, diverged: off from the first call, as it was
    assert resumed.info["resumes"][0]["from_step"] == 8 and resumed.info["models"]["boom"]["status"] == "diverged"
    pd.testing.assert_frame_equal(resumed.losses.sort_values(list(resumed.losses.columns[:5])).reset_index(drop=True),
                                  whole.losses.sort_values(list(whole.losses.columns[:5])).reset_index(drop=True), check_exact=True)
    for name in ("fcn", "boom", "unet", "deconv"):  # boom's step counter too: it stopped counting when switched off
        assert_same_weights(resumed.models[name].get_weights(), whole.models[name].get_weights())


@pytest.mark.slow
def test_jit_compile_runs_a_model_xla_can_compile(tmp_path):
    raw = tiny_config(models=[{"name": "deconv", "arch": "tiny_deconv", "jit_compile": True}], train={"deterministic": False})
    result = run(validate_config(raw), results_dir=tmp_path)
    assert result.info["status"] == "completed"
    assert np.isfinite(train_losses(result, "deconv")).all()


@pytest.mark.slow
def test_jit_compile_names_the_model_xla_cannot_compile(tmp_path):
    # Nearest-neighbour upsampling has no XLA gradient kernel on CPU (as in sm's Unet).
    raw = tiny_config(
        models=[{"name": "deconv", "arch": "tiny_deconv"}, {"name": "unet", "arch": "tiny_unet"}],
        train={"jit_compile": True, "deterministic": False},
    )
    with pytest.raises(ConfigError) as info:
        run(validate_config(raw), results_dir=tmp_path)
    assert "XLA cannot compile" in str(info.value)
    assert len(info.value.problems) == 1 and info.value.problems[0].startswith("unet (tiny_unet)")
    run_json = next((tmp_path / "tiny").glob("*/run.json"))
    assert json.loads(run_json.read_text())["status"] == "failed"


@pytest.mark.slow
def test_multiclass_task_trains_with_softmax_and_scores_per_class(tmp_path):
    raw = tiny_config(data={"classes": 3, "test_size": 6}, models=[{"name": "fcn", "arch": "tiny_fcn", "loss": "cce+dice"}])
    result = run(validate_config(raw), results_dir=tmp_path)
    assert result.models["fcn"].output_shape[-1] == 3
    val = result.losses.query("split == 'val'")
    assert val["value"].notna().all()
    # Each foreground class's scores in summary.csv (they were only in the per-image tables), the
    # overall score their mean over the classes present: both present here.
    row = result.summary.set_index("model").loc["fcn"]
    for split in ("val", "test"):
        per_class = [row[f"{split}_iou_c1"], row[f"{split}_iou_c2"]]
        assert all(0 <= v <= 1 for v in per_class) and row[f"{split}_f1_c2"] >= 0
        assert abs(row[f"{split}_iou"] - sum(per_class) / 2) < 1e-9


@pytest.mark.parametrize(
    "step, expected",
    [(0, 4), (3, 1), (4, 4), (8, 2), (9, 1)],
)
def test_calls_stop_at_epoch_ends_and_at_the_last_step(step, expected):
    assert Schedule(total_steps=10, steps_per_call=5, steps_per_epoch=4, checkpoint_every=4).next_call(step) == expected


def test_calls_also_stop_at_checkpoint_steps():
    schedule = Schedule(total_steps=20, steps_per_call=10, steps_per_epoch=8, checkpoint_every=3)
    assert schedule.next_call(0) == 3
    assert schedule.next_call(6) == 2


@pytest.mark.slow
def test_segmentation_models_trained_together_equal_trained_alone(tmp_path):
    """Three sm architectures at a size where, without deterministic mode, a fused Linknet drifted
    from its solo run (max |dw| 0.11 after 8 steps): deterministic mode must make them equal."""
    raw = tiny_config(
        data={"image_size": [64, 64], "train_size": 8, "val_size": 2, "batch_size": 2},
        models=[
            {"name": "unet", "arch": "Unet", "backbone": "resnet18"},
            {"name": "linknet", "arch": "Linknet", "backbone": "resnet18"},
            {"name": "fpn", "arch": "FPN", "backbone": "resnet18"},
        ],
        train={"epochs": 2, "steps_per_call": 4},
    )
    result = run(validate_config(raw), results_dir=tmp_path)
    for name in ("unet", "linknet", "fpn"):
        losses, weights = train_alone(result.config, name)
        assert train_losses(result, name) == losses, name
        assert_same_weights(result.models[name].get_weights(), weights)


@pytest.mark.slow
def test_without_divergence_isolation_a_plain_loop_is_reproduced_too(tmp_path):
    config = validate_config(tiny_config(train={"epochs": 3, "steps_per_call": 5, "isolate_divergence": False}))
    result = run(config, results_dir=tmp_path)
    for name in ("fcn", "unet"):
        losses, weights = train_alone(config, name)
        assert train_losses(result, name) == losses
        assert_same_weights(result.models[name].get_weights(), weights)


@pytest.mark.slow
def test_best_weights_wait_for_the_checkpoint_and_are_the_same_whenever_it_comes(tmp_path):
    """best.keras is written with the next checkpoint: at every epoch end (the default) the live
    weights, with one checkpoint at the end a copy kept since the improvement. Both runs write the
    same best.json and the same weights."""
    from harness.core.backend import import_keras

    every_epoch = run(validate_config(tiny_config(train={"epochs": 3})), results_dir=tmp_path / "e")
    at_the_end = run(validate_config(tiny_config(train={"epochs": 3, "checkpoint_every_steps": 12})), results_dir=tmp_path / "c")
    assert at_the_end.info["checkpoints"] == [12] and every_epoch.info["checkpoints"] == [12, 8, 4]
    steps = {}
    for name in ("fcn", "unet", "deconv"):
        best = [json.loads((r.run_dir / "models" / name / "best.json").read_text()) for r in (every_epoch, at_the_end)]
        assert best[0] == best[1], name
        steps[name] = best[0]["step"]
        weights = [import_keras().models.load_model(r.run_dir / "models" / name / "best.keras", compile=False).get_weights() for r in (every_epoch, at_the_end)]
        for a, b in zip(*weights):
            np.testing.assert_array_equal(a, b)
    assert min(steps.values()) < 12, steps  # one member's best came before the only checkpoint: the copy was written
    final = import_keras().models.load_model(at_the_end.run_dir / "models" / "unet" / "model.keras", compile=False).get_weights()
    alone = import_keras().models.load_model(every_epoch.run_dir / "models" / "unet" / "model.keras", compile=False).get_weights()
    for a, b in zip(final, alone):  # writing a copy into the model and back left its training untouched
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("writes, training, expected", [
    (5.0, 20.0, None),  # a quarter of a short run: seconds, not worth a warning
    (12.0, 100.0, None),  # above 10 s but 12% of training
    (36.0, 200.0, "train.checkpoint_every_steps: 64 would write them about 1/4 as often"),
    (100.0, 200.0, "train.checkpoint_every_steps: 96 would write them only at the end"),
])
def test_a_run_whose_checkpoints_cost_much_of_training_says_what_interval_would_not(writes, training, expected):
    from harness.training.checkpoints import write_cost_warning

    warning = write_cost_warning(writes, training, every=16, total_steps=96, checkpoint_mb=1234.0)
    if expected is None:
        assert warning is None
    else:
        assert expected in warning and f"{writes:.1f} s of training's {training:.1f} s" in warning and "1,234 MB" in warning


@pytest.mark.slow
def test_the_write_cost_warning_quotes_the_runs_own_phases_and_checkpoint(tmp_path, monkeypatch):
    from harness.training import checkpoints

    monkeypatch.setattr(checkpoints, "WRITES_MIN_S", 0.0)
    monkeypatch.setattr(checkpoints, "WRITES_SHARE", 0.0)  # any write time warns: the wiring, not the threshold
    result = run(validate_config(tiny_config()), results_dir=tmp_path)
    (warning,) = [w for w in result.info["warnings"] if w.startswith("checkpoints and best weights took")]
    seconds = result.info["phases"]["seconds"]
    assert f"took {seconds['checkpoints'] + seconds['best_weights']:.1f} s of training's" in warning
    assert f"({checkpoints.size_mb(result.run_dir / 'checkpoints', 8):,.0f} MB)" in warning and "every 4 steps" in warning


def test_the_last_reference_to_an_iterator_is_dropped_on_a_thread_of_its_own():
    """An autotuned iterator's destructor waits for its tuning thread's sleep (2 s after smoke's
    training): `let_go_of` returns before the destructor ends, which runs on its own thread."""
    import threading

    from harness.data.pipeline import let_go_of

    release, finalized_on = threading.Event(), []

    class SlowToDrop:
        def __del__(self):
            finalized_on.append(threading.current_thread().name)
            release.wait(timeout=30)  # as the tuning thread's sleep: this thread waits, the caller's does not

    holder = [SlowToDrop()]
    dropping = let_go_of(holder)
    returned_while_dropping = dropping.is_alive()  # the destructor is still waiting for `release`
    release.set()
    dropping.join(timeout=30)
    assert returned_while_dropping and holder == [] and finalized_on == ["harness-drop-iterator"]


def test_the_runs_training_iterator_is_dropped_off_the_runs_thread(tmp_path, monkeypatch):
    """Dropping it on the run's thread kept smoke's run idle for 2 s, in some runs, before its
    results were printed."""
    import threading
    import weakref

    from harness.core.placement import Placement

    finalized_on, made = [], Placement.input_iterator

    def recorded(self, dataset):
        iterator = made(self, dataset)
        weakref.finalize(iterator, lambda: finalized_on.append(threading.current_thread().name))
        return iterator

    monkeypatch.setattr(Placement, "input_iterator", recorded)
    run(validate_config(tiny_config(models=[{"name": "fcn", "arch": "tiny_fcn"}], train={"epochs": 1})), results_dir=tmp_path)
    for thread in threading.enumerate():
        if thread.name == "harness-drop-iterator":
            thread.join(timeout=30)
    assert finalized_on[:1] == ["harness-drop-iterator"]  # the training iterator, the first one made
