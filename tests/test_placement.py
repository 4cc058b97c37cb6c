"""Placement on two logical CPU devices: mirrored, per_model, multi_worker, precision, bad input."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest
from conftest import KILL_CONFIG, REPO, only_run_dir, run_cli, start_cli, tiny_config, wait_for_rows, write_yaml

from harness.training import checkpoints as ckpt
from harness.api import resume, run
from harness.core.backend import import_tf
from harness.config.loading import validate_config
from harness.errors import ConfigError
from harness.members.registry import build_members
from harness.core.placement import build_placement
from harness.rundir import read_csv

tf = import_tf()

# No BatchNorm: under data parallelism BN normalises each replica's half batch, so only BN-free
# models can match one device up to float rounding.
NO_BN_MODELS = [
    {"name": "a", "arch": "factories:small_convnet"},
    {"name": "b", "arch": "factories:small_convnet", "options": {"width": 6}, "optimizer": {"name": "sgd", "learning_rate": 0.1, "momentum": 0.9}},
]
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}  # float32 sums taken in another order


def placed(strategy: str, models=None, **placement) -> dict:
    raw = tiny_config(placement={"strategy": strategy, "logical_cpus": 2, **placement})
    if models is not None:
        raw["models"] = models
    return raw


def losses_of(result) -> pd.DataFrame:
    return result.losses.sort_values(["model", "split", "metric", "step"]).reset_index(drop=True)


@pytest.fixture(scope="module")
def one_device_no_bn(tmp_path_factory):
    return run(validate_config(placed("one_device", NO_BN_MODELS)), results_dir=tmp_path_factory.mktemp("r"))


@pytest.mark.slow
def test_mirrored_matches_one_device_within_tolerance(one_device_no_bn, tmp_path):
    mirrored = run(validate_config(placed("mirrored", NO_BN_MODELS)), results_dir=tmp_path)
    plan = mirrored.info["placement"]
    assert plan["strategy"] == "mirrored" and plan["replicas"] == 2 and plan["per_replica_batch"] == 2
    a, b = losses_of(mirrored), losses_of(one_device_no_bn)
    assert a[["model", "split", "metric", "step"]].equals(b[["model", "split", "metric", "step"]])
    np.testing.assert_allclose(a["value"], b["value"], **TOLERANCE)
    for name in ("a", "b"):
        for x, y in zip(mirrored.models[name].get_weights(), one_device_no_bn.models[name].get_weights()):
            np.testing.assert_allclose(x, y, **TOLERANCE)


@pytest.mark.slow
def test_per_model_pins_each_model_and_equals_one_device_bitwise(tmp_path):
    # `custom` is a user's kind written as the README shows: maths only, no pinning, no batch copy.
    models = [*tiny_config()["models"], {"name": "custom", "kind": "custom_kinds:FocalWithCoverage", "arch": "tiny_unet"}]
    one = run(validate_config(placed("one_device", models)), results_dir=tmp_path / "one")
    pinned = run(validate_config(placed("per_model", models)), results_dir=tmp_path / "pinned")
    devices = {"fcn": "CPU:0", "unet": "CPU:1", "deconv": "CPU:0", "custom": "CPU:1"}
    assert pinned.info["placement"]["models"] == {name: [f"/device:{d}"] for name, d in devices.items()}
    for name, device in devices.items():
        model = pinned.models[name]
        assert all(v.device.endswith(device) for v in model.variables), name
    assert losses_of(pinned)["value"].tolist() == losses_of(one)["value"].tolist()
    for name in devices:
        for x, y in zip(pinned.models[name].get_weights(), one.models[name].get_weights()):
            np.testing.assert_array_equal(x, y)


@pytest.mark.slow
def test_optimizer_state_lives_with_its_pinned_model():
    config = validate_config(placed("per_model"))
    members = build_members(config, build_placement(config).model_devices)
    unet = members[1]
    assert unet.device == "/device:CPU:1"
    assert all(v.device.endswith("CPU:1") for v in unet.optimizer.variables)


@pytest.mark.slow
def test_checkpoint_of_a_mirrored_run_restores_under_one_device(tmp_path):
    raw = placed("mirrored", NO_BN_MODELS)
    raw["train"].update(checkpoint_every_steps=4)
    mirrored = run(validate_config(raw), results_dir=tmp_path / "r")
    saved = tf.train.load_checkpoint(str(mirrored.run_dir / "checkpoints" / "ckpt-4"))

    one_config = validate_config(placed("one_device", NO_BN_MODELS))
    with tf.distribute.OneDeviceStrategy("/cpu:0").scope():
        members = build_members(one_config)
        step = tf.Variable(0, dtype=tf.int64)
    info = json.loads((mirrored.run_dir / "run.json").read_text())
    checkpoint = ckpt.make_checkpoint(members, step, info["run_token"])
    restored = ckpt.restore_newest_valid(checkpoint, mirrored.run_dir / "checkpoints", info["checkpoints"])
    assert restored.step == 8 and info["checkpoints"] == [8, 4]  # newest
    checkpoint.with_token.read(str(mirrored.run_dir / "checkpoints" / "ckpt-4")).assert_consumed()
    kernel = members[0].model.trainable_variables[0]
    key = next(k for k in saved.get_variable_to_shape_map() if k.startswith("member_0_model") and "kernel" in k and "OPTIMIZER" not in k and saved.get_variable_to_shape_map()[k] == kernel.shape)
    np.testing.assert_array_equal(saved.get_tensor(key), kernel.numpy())

    # And through the API: interrupted at step 4 under mirrored, resumed on one device.
    copy = tmp_path / "copy"
    shutil.copytree(mirrored.run_dir, copy)
    for f in (copy / "checkpoints").glob("ckpt-8.*"):
        f.unlink()
    info = json.loads((copy / "run.json").read_text())
    info["status"] = "interrupted"
    (copy / "run.json").write_text(json.dumps(info))
    result = resume(copy, ["placement.strategy=one_device"])
    assert result.info["status"] == "completed" and result.info["resumes"][-1]["from_step"] == 4
    assert result.info["placement"]["strategy"] == "one_device"


def test_resume_refuses_to_change_what_is_trained(one_device_no_bn):
    with pytest.raises(ConfigError, match="only where it runs may change") as info:
        resume(one_device_no_bn.run_dir, ["placement.strategy=mirrored", "train.epochs=9"])
    assert info.value.problems == ["train.epochs=9"]


@pytest.mark.slow
def test_bfloat16_trains_close_to_float32(tmp_path):
    f32 = run(validate_config(placed("one_device")), results_dir=tmp_path / "f32")
    bf16 = run(validate_config(placed("one_device", precision="mixed_bfloat16")), results_dir=tmp_path / "bf16")
    model = bf16.models["unet"]
    assert model.get_layer("e1_conv").compute_dtype == "bfloat16" and model.output.dtype == tf.float32
    a, b = losses_of(bf16), losses_of(f32)
    assert np.isfinite(a["value"]).all()
    first = (a["split"] == "train") & (a["step"] <= 2)
    np.testing.assert_allclose(a.loc[first, "value"], b.loc[first, "value"], rtol=0.02)  # bfloat16 has 8 mantissa bits


@pytest.mark.slow
def test_float16_has_one_loss_scale_optimizer_per_model(tmp_path):
    from harness.core.backend import import_keras

    keras = import_keras()
    models = [*tiny_config()["models"], {"name": "custom", "kind": "custom_kinds:FocalWithCoverage", "arch": "tiny_fcn"}]
    config = validate_config(placed("one_device", models, precision="mixed_float16"))
    try:
        members = build_members(config)
        assert all(isinstance(m.optimizer, keras.mixed_precision.LossScaleOptimizer) for m in members)
        assert len({id(m.optimizer) for m in members}) == len(members)
        result = run(config, results_dir=tmp_path)
        assert np.isfinite(result.losses["value"]).all()
    finally:
        keras.mixed_precision.set_global_policy("float32")


@pytest.mark.parametrize(
    "placement, message",
    [
        ({"strategy": "one_device", "device": "/gpu:3"}, "device(s) /gpu:3 do not exist"),
        ({"strategy": "per_model", "devices": ["/cpu:0", "/cpu:7"]}, "device(s) /cpu:7 do not exist"),
        ({"strategy": "mirrored", "devices": ["/cpu:0", "/cpu:0"]}, "listed twice"),
        ({"strategy": "split_gpu"}, "needs a GPU"),
    ],
)
def test_bad_placement_is_one_clear_message(placement, message):
    from harness.core.placement import configure_devices

    config = validate_config(tiny_config(placement=placement))
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        configure_devices(config.placement)
        build_placement(config)


def test_global_batch_not_divisible_by_replicas():
    raw = placed("mirrored")
    raw["data"].update(batch_size=5, train_size=20)
    with pytest.raises(ConfigError, match="5 is not divisible by 2"):
        build_placement(validate_config(raw))


@pytest.mark.parametrize(
    "tf_config, message",
    [
        (None, "multi_worker needs TF_CONFIG"),
        ("{not json", "not valid JSON"),
        ('{"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker", "index": 3}}', "is not in its cluster"),
    ],
)
def test_multi_worker_without_valid_tf_config(tmp_path, tf_config, message):
    env = {"TF_CONFIG": tf_config} if tf_config else {}
    path = write_yaml(tmp_path / "c.yaml", tiny_config(placement={"strategy": "multi_worker"}))
    clean = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    result = subprocess.run(
        [__import__("sys").executable, "-m", "harness", "run", str(path), "--results", str(tmp_path / "r")],
        env={**{k: v for k, v in clean.items() if k not in ("TF_CPP_MIN_LOG_LEVEL",)}, **env},
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
def test_a_run_waits_for_every_worker_once_its_files_are_final(tmp_path, monkeypatch):
    # Over several workers, one that left while the chief still wrote its outputs was reported by the
    # chief's coordination service as crashed; the wait (a collective) must come after every file.
    from harness.core.placement import Placement

    seen = []

    def wait(placement):
        (run_dir,) = (tmp_path / "r" / "tiny").iterdir()
        seen.append((json.loads((run_dir / "run.json").read_text())["status"], (run_dir / "report.html").is_file()))

    monkeypatch.setattr(Placement, "wait_for_every_worker", wait)
    assert run(write_yaml(tmp_path / "c.yaml", tiny_config(train={"epochs": 1})), results_dir=tmp_path / "r").info["status"] == "completed"
    assert seen == [("completed", True)]


def test_multi_worker_two_processes_match_one_process(tmp_path):
    raw = tiny_config(models=NO_BN_MODELS)
    raw["output"]["progress"] = "lines"
    config = write_yaml(tmp_path / "c.yaml", raw)
    env = {"PYTHONPATH": str(REPO / "tests")}
    single = run_cli("run", config, "--results", tmp_path / "single", env=env, timeout=300)
    assert single.returncode == 0, single.stderr
    workers = run_cli("workers", "2", config, "--results", tmp_path / "multi", env=env, timeout=300)
    assert workers.returncode == 0, workers.stderr
    assert "multi_worker, 2 replica(s), global batch 4 (2 per replica)" in workers.stderr
    # The other worker waits for the chief's outputs: its coordination service saw no worker leave early.
    assert "stopped sending heartbeats" not in workers.stderr and "E0000" not in workers.stderr, workers.stderr
    runs = list((tmp_path / "multi" / "tiny").iterdir())
    assert len(runs) == 1, "only the chief writes a run directory"
    multi = read_csv(runs[0] / "losses.csv").sort_values(["model", "split", "metric", "step"])
    one = read_csv(next((tmp_path / "single" / "tiny").iterdir()) / "losses.csv").sort_values(["model", "split", "metric", "step"])
    np.testing.assert_allclose(multi["value"].to_numpy(), one["value"].to_numpy(), **TOLERANCE)


def _workers(*command) -> list:
    """`harness COMMAND` as two workers of a local cluster, each with its TF_CONFIG."""
    from harness.training.launch import free_ports

    addresses = [f"127.0.0.1:{port}" for port in free_ports(2)]
    return [start_cli(*command, env={"TF_CONFIG": json.dumps({"cluster": {"worker": addresses}, "task": {"type": "worker", "index": i}})})
            for i in range(2)]


def test_a_lost_worker_is_exit_4_naming_it_and_resume_on_every_worker_finishes_the_run(tmp_path):
    raw = {**KILL_CONFIG, "placement": {"strategy": "multi_worker"}}
    chief, other = _workers("run", write_yaml(tmp_path / "c.yaml", raw), "--results", tmp_path / "r")
    deadline = time.monotonic() + 120
    while not (tmp_path / "r" / "tiny").is_dir() or not any((tmp_path / "r" / "tiny").iterdir()):
        assert time.monotonic() < deadline and chief.poll() is None, chief.stderr.read() if chief.poll() is not None else "no run folder"
        time.sleep(0.05)
    run_dir = only_run_dir(tmp_path / "r")
    assert wait_for_rows(run_dir / "losses.csv", 6, process=chief)
    other.kill()  # its machine lost, as far as the chief can tell
    _, stderr = chief.communicate(timeout=300)
    other.communicate()
    assert chief.returncode == 4, stderr
    # Named when TensorFlow's heartbeat check saw it go; on a loaded machine a reset connection can come first.
    said = ("a worker of the cluster was lost (/job:worker/replica:0/task:1 stopped sending heartbeats", "a worker of the cluster was lost (a peer stopped answering")
    assert any(text in stderr for text in said), stderr
    assert f"harness resume {run_dir}" in stderr and "internal error" not in stderr and "Traceback" not in stderr
    assert json.loads((run_dir / "run.json").read_text())["status"] == "failed"

    resumed = _workers("resume", run_dir)  # what the message says to do
    outcomes = [process.communicate(timeout=300) for process in resumed]
    assert [process.returncode for process in resumed] == [0, 0], outcomes
    assert json.loads((run_dir / "run.json").read_text())["status"] == "completed"
    assert f"results: {run_dir}" in outcomes[0][0]
    # The other worker's scratch folder is gone when it ends: it names no path of its own.
    (out, err) = outcomes[1]
    assert out.strip() == "harness: worker 1 is done; the chief wrote the run's results", out
    assert "said running, but no process held the run" not in err, err


def test_a_lost_peer_seen_from_another_worker_is_exit_4_sending_it_to_the_chiefs_folder(tmp_path):
    from harness.errors import ResourceError
    from harness.training.failures import WORKER_SCRATCH, translate

    said = ("{{function_node __wrapped__CollectiveReduceV2_device_/job:worker/replica:0/task:1/device:CPU:0}} Collective ops is "
            "aborted by: Error reported from /job:worker/task:0: The following tasks are unhealthy (stopped sending heartbeats):\n"
            "/job:worker/replica:0/task:0\nThe tasks have crashed.")
    error = translate(tf.errors.UnavailableError(None, None, said), tmp_path / f"{WORKER_SCRATCH}x1" / "run")
    assert isinstance(error, ResourceError) and error.exit_code == 4
    assert "(/job:worker/replica:0/task:0 stopped sending heartbeats" in str(error) and "harness resume on the chief's run folder" in str(error)
    assert "TensorFlow said: Collective ops is aborted" in str(error)  # without TensorFlow's function name
    other = translate(tf.errors.UnavailableError(None, None, "Socket closed"), tmp_path / "run")
    assert "(a peer stopped answering" in str(other) and f"harness resume {tmp_path / 'run'}" in str(other)
    aborted = translate(tf.errors.CancelledError(None, None, "Collective ops is aborted by: recvmsg:Connection reset by peer"), tmp_path / "run")
    assert isinstance(aborted, ResourceError), aborted  # the class TensorFlow raises it with varies; what it says does not
    assert translate(tf.errors.CancelledError(None, None, "cancelled"), tmp_path / "run").__class__ is tf.errors.CancelledError


def test_a_workers_copy_of_the_run_skips_what_the_chief_may_remove_meanwhile(tmp_path, monkeypatch):
    # On resume every worker copies the chief's run folder while the chief starts writing it.
    from harness import rundir as rd
    from harness.training.entry import _scratch_run_dir

    source = tmp_path / "run"
    (source / "checkpoints" / "ckpt-4_temp").mkdir(parents=True)  # a killed save's leftover, which the chief removes
    for name, text in (("run.json", "{}"), (".run.json.x1.tmp", "half"), ("losses.csv", "rows"), ("checkpoints/ckpt-2.index", "i")):
        (source / name).write_text(text)
    real_copy = shutil.copy2

    def listed_then_gone(src, dst, **kwargs):
        if src.endswith("losses.csv"):
            raise FileNotFoundError(src)
        return real_copy(src, dst, **kwargs)

    monkeypatch.setattr(shutil, "copy2", listed_then_gone)
    with _scratch_run_dir(None, copy_from=rd.RunDir(source)) as run:
        copied = sorted(str(p.relative_to(run.path)) for p in run.path.rglob("*"))
    assert copied == ["checkpoints", "checkpoints/ckpt-2.index", "run.json"]


def test_a_killed_workers_scratch_folder_is_swept_by_the_next_worker_and_a_live_ones_kept(tmp_path):
    """A worker killed outright (the lost-peer test above kills one) never ran its cleanup, and its
    scratch folder stayed in the temp folder for good, with a resume's copy of the checkpoints."""
    from harness.rundir import FolderLock
    from harness.training.entry import sweep_dead_scratch
    from harness.training.failures import WORKER_SCRATCH

    dead, live, starting, other = (tmp_path / f"{WORKER_SCRATCH}{name}" for name in ("dead", "live", "starting", "nolock"))
    for folder in (dead, live, starting, other):
        (folder / "run" / "checkpoints").mkdir(parents=True)
    killed = subprocess.run([sys.executable, "-c", "import os, sys; from harness.rundir import FolderLock; "
                             "FolderLock(sys.argv[1]).acquire(); os._exit(9)", str(dead)], capture_output=True, text=True)
    assert killed.returncode == 9, killed.stderr  # died holding it: the lock file stays, naming it
    (starting / ".lock").write_text("")  # created, not yet locked by the worker making it
    with FolderLock(live):
        sweep_dead_scratch(tmp_path)
        assert not dead.exists() and live.exists() and starting.exists() and other.exists()
