"""Checkpoint, resume, export: a run killed at any moment loses nothing.

Kill/resume tests drive the real CLI in subprocesses and compare, bit for bit, with a run that was
never interrupted: losses.csv byte for byte, final weights, optimizer state.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import KILL_CONFIG, TOTAL_STEPS, only_run_dir, run_cli, run_main, start_cli, wait_for_rows, wait_for_run_dir, write_yaml

from harness.core.backend import import_keras, import_tf
from harness.rundir import FolderLock

tf = import_tf()
keras = import_keras()

def checkpoint_values(run_dir: Path) -> dict[str, np.ndarray]:
    reader = tf.train.load_checkpoint(str(run_dir / "checkpoints" / f"ckpt-{TOTAL_STEPS}"))
    skip = ("OBJECT_GRAPH", "save_counter", "run_token")  # the run's identity differs between runs by design
    names = [n for n in reader.get_variable_to_shape_map() if not any(s in n for s in skip)]
    return {n: reader.get_tensor(n) for n in names}


def load_exported(run_dir: Path, name: str):
    return keras.models.load_model(run_dir / "models" / name / "model.keras", compile=False)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("uninterrupted")
    result = run_cli("run", write_yaml(folder / "c.yaml", KILL_CONFIG), "--results", folder / "r")
    assert result.returncode == 0, result.stderr
    return only_run_dir(folder / "r")


def test_killed_repeatedly_then_resumed_equals_uninterrupted(uninterrupted, tmp_path):
    rng = random.Random(7)
    config = write_yaml(tmp_path / "c.yaml", KILL_CONFIG)
    results = tmp_path / "r"
    kills = 0
    process = start_cli("run", config, "--results", results)
    run_dir = None
    for cycle in range(4):  # four kills, then the last resume runs to the end
        # Kill once some progress exists, at a random moment: mid-step, mid-save or mid-write.
        run_dir = run_dir or wait_for_run_dir(results, process)
        assert run_dir is not None, "the first run ended before creating its run directory"
        rows_before = (run_dir / "losses.csv").read_text().count("\n") if (run_dir / "losses.csv").exists() else 0
        if wait_for_rows(run_dir / "losses.csv", rows_before + 2 * rng.randint(2, 5), timeout=60, process=process):
            time.sleep(rng.uniform(0.0, 0.3))  # else it finished before we could kill it
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            kills += 1
        process.wait(timeout=60)
        # Everything is deterministic, so what was written so far is a byte prefix of the clean
        # run's table (but for a line the kill cut short).
        written = (run_dir / "losses.csv").read_bytes() if (run_dir / "losses.csv").exists() else b""
        complete = written[: written.rfind(b"\n") + 1]
        assert (uninterrupted / "losses.csv").read_bytes().startswith(complete), f"cycle {cycle}"
        status = json.loads((run_dir / "run.json").read_text())["status"]
        if status == "completed":
            break
        process = start_cli("resume", run_dir)
    else:
        process.wait(timeout=300)
    assert kills >= 3, f"only {kills} kills landed; the test must interrupt the run several times"
    print(f"kill/resume cycles: {kills} kills, every intermediate table a prefix of the clean one")
    if process.poll() is None or json.loads((run_dir / "run.json").read_text())["status"] != "completed":
        process.wait(timeout=300)
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "completed" and info["steps_done"] == TOTAL_STEPS
    assert 1 <= len(info["resumes"]) <= kills  # a kill during a resume's start-up records none

    assert (run_dir / "losses.csv").read_bytes() == (uninterrupted / "losses.csv").read_bytes()
    for name in ("fcn", "unet"):
        for a, b in zip(load_exported(run_dir, name).get_weights(), load_exported(uninterrupted, name).get_weights()):
            np.testing.assert_array_equal(a, b)
    resumed_state, clean_state = checkpoint_values(run_dir), checkpoint_values(uninterrupted)
    assert resumed_state.keys() == clean_state.keys()
    assert any("optimizer" in key and "iter" in key for key in resumed_state), "optimizer state is checkpointed"
    for key in clean_state:
        np.testing.assert_array_equal(resumed_state[key], clean_state[key], err_msg=key)


def test_sigterm_saves_exits_75_and_resume_finishes(uninterrupted, tmp_path):
    results = tmp_path / "r"
    process = start_cli("run", write_yaml(tmp_path / "c.yaml", KILL_CONFIG), "--results", results)
    deadline = time.monotonic() + 120
    while not (results / "tiny").exists() or not any((results / "tiny").iterdir()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    run_dir = only_run_dir(results)
    wait_for_rows(run_dir / "losses.csv", 6)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 75, stderr
    assert "harness resume" in stderr and "Traceback" not in stderr
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "interrupted" and info["interrupted_by"] == "SIGTERM"
    assert (run_dir / "checkpoints" / f"ckpt-{info['steps_done']}.index").exists()

    resumed = run_cli("resume", run_dir)
    assert resumed.returncode == 0, resumed.stderr
    assert (run_dir / "losses.csv").read_bytes() == (uninterrupted / "losses.csv").read_bytes()
    # TensorBoard, too, has every step once
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tb" / "unet"), size_guidance={"tensors": 0})  # 0: keep all
    events.Reload()
    assert [e.step for e in events.Tensors("train/loss")] == list(range(1, TOTAL_STEPS + 1))


def test_a_signal_after_training_stops_before_the_end_of_run_and_resume_redoes_it(tmp_path):
    """Ctrl-C during the end of the run (the quickstart's probes and outputs take a minute) stops at
    the next end-of-run action, exit 75, instead of promising that and then finishing anyway; the
    resumed run trains nothing more (every row as it was) and writes the end of the run. (In
    process, its rows are not compared with a CLI run's: in the whole suite, after other tests in
    the same worker, they differed in the last digits; alone they did not.)"""
    from harness.config.loading import validate_config
    from harness.errors import Interrupted
    from harness.training.actions import END_OF_RUN
    from harness.training.entry import resume_run, run_experiment

    def ctrl_c(done):
        os.kill(os.getpid(), signal.SIGINT)  # arrives while the end of the run has begun

    with pytest.raises(Interrupted, match=f"after step {TOTAL_STEPS}/{TOTAL_STEPS} before the end of the run: FLOPs, exported models, tables, plots and report.html not written"):
        run_experiment(validate_config(KILL_CONFIG), tmp_path / "r", end_of_run=(ctrl_c, *END_OF_RUN))
    run_dir = only_run_dir(tmp_path / "r")
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "interrupted" and info["interrupted_by"] == "SIGINT" and info["steps_done"] == TOTAL_STEPS
    assert not (run_dir / "summary.csv").exists() and not (run_dir / "models" / "unet" / "model.keras").exists()
    trained = (run_dir / "losses.csv").read_bytes()
    resumed = resume_run(run_dir)
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "completed" and len(resumed.summary) == 2
    assert info["resumes"][-1]["from_step"] == TOTAL_STEPS and info["resumes"][-1]["rows_redone"] == 0
    assert (run_dir / "losses.csv").read_bytes() == trained  # nothing trained again
    assert (run_dir / "summary.csv").exists() and (run_dir / "report.html").exists() and load_exported(run_dir, "unet") is not None


def test_a_signal_once_the_run_is_complete_says_what_it_still_writes_not_exit_75(tmp_path, capsys):
    """Ctrl-C after the run is marked completed (while its report page is written) was answered
    "harness stops after the end-of-run action in progress and exits with 75; harness resume ...
    redoes the end of the run", and then the run finished with 0: a completed run is not stopped."""
    from harness.config.loading import validate_config
    from harness.training.actions import END_OF_RUN, mark_completed
    from harness.training.entry import run_experiment

    def ctrl_c(done):
        os.kill(os.getpid(), signal.SIGINT)
        deadline = time.monotonic() + 10
        while "SIGINT received" not in (said := capsys.readouterr().err) and time.monotonic() < deadline:
            time.sleep(0.02)  # the notice is printed by a thread that reads the signal's pipe
        ctrl_c.said = said

    after = END_OF_RUN.index(mark_completed) + 1
    run_experiment(validate_config(KILL_CONFIG), tmp_path / "r", end_of_run=(*END_OF_RUN[:after], ctrl_c, *END_OF_RUN[after:]))
    run_dir = only_run_dir(tmp_path / "r")
    assert json.loads((run_dir / "run.json").read_text())["status"] == "completed" and (run_dir / "report.html").exists()
    assert f"the run is complete (step {TOTAL_STEPS}); harness finishes writing report.html" in ctrl_c.said, ctrl_c.said
    assert "exits with 75" not in ctrl_c.said


def test_a_run_stopped_during_its_end_names_only_what_is_still_unwritten():
    """Stopped after its tables (Ctrl-C while they were written), a run said "probes, test scores,
    tables and report not written" beside the summary.csv and plots it had just written. What is
    left is named from the actions still to run, each with something to do."""
    from types import SimpleNamespace

    from harness.config.loading import validate_config
    from harness.training.actions import END_OF_RUN, not_yet_written, write_tables

    def done(**output):
        return SimpleNamespace(config=validate_config({**KILL_CONFIG, "output": {**KILL_CONFIG["output"], **output}}), datasets=SimpleNamespace(test=None))

    after_tables = END_OF_RUN[END_OF_RUN.index(write_tables) + 1:]
    assert not_yet_written(done(), after_tables) == "report.html"
    assert not_yet_written(done(mlflow={"tracking_uri": "file:/nowhere"}), after_tables) == "report.html and the MLflow copy"
    everything = done(probe_steps=3, serve_probe=True)
    assert not_yet_written(everything, END_OF_RUN) == "probes, FLOPs, exported models, serving costs, tables, plots and report.html"
    assert not_yet_written(done(export=False), END_OF_RUN) == "FLOPs, tables, plots and report.html"  # the suite's tiny runs probe nothing
    assert not_yet_written(done(), ()) == ""


def copy_run(source: Path, target: Path, keep_until_step: int) -> Path:
    """A copy of a finished run as if it had been killed after `keep_until_step`."""
    import shutil

    shutil.copytree(source, target)
    info = json.loads((target / "run.json").read_text())
    info.update(status="running", steps_done=keep_until_step)
    (target / "run.json").write_text(json.dumps(info))
    (target / "summary.csv").unlink()
    shutil.rmtree(target / "models")
    return target


def test_corrupt_newest_checkpoint_falls_back_and_leftovers_are_cleaned(uninterrupted, tmp_path):
    run_dir = copy_run(uninterrupted, tmp_path / "run", TOTAL_STEPS)
    checkpoints = run_dir / "checkpoints"
    steps = sorted(int(p.name.split("-")[1].split(".")[0]) for p in checkpoints.glob("ckpt-*.index"))
    newest, previous = steps[-1], steps[-2]
    data = next(checkpoints.glob(f"ckpt-{newest}.data-*"))
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 3])  # a save cut short
    (checkpoints / "checkpoint").write_text("garbage \x00 not a pointer")
    (checkpoints / f"ckpt-{newest + 2}_temp").mkdir()  # what a kill during a save leaves
    (checkpoints / f"ckpt-{newest + 2}_temp" / "part-0").write_bytes(b"x")

    result = run_cli("resume", run_dir)
    assert result.returncode == 0, result.stderr
    assert f"skipped checkpoint ckpt-{newest}: does not restore completely" in result.stderr
    assert f"from step {previous}" in result.stderr
    assert not (checkpoints / f"ckpt-{newest + 2}_temp").exists()
    assert (run_dir / "losses.csv").read_bytes() == (uninterrupted / "losses.csv").read_bytes()


def test_resuming_with_other_versions_says_which_and_records_them(uninterrupted, tmp_path):
    from harness import __version__

    run_dir = copy_run(uninterrupted, tmp_path / "run", 8)
    info = json.loads((run_dir / "run.json").read_text())
    info["versions"]["harness"] = "0.0.1"  # started by an older harness
    (run_dir / "run.json").write_text(json.dumps(info))
    result = run_cli("resume", run_dir)
    assert result.returncode == 0, result.stderr
    assert f"resuming with other versions than the run started with (harness 0.0.1 -> {__version__}): the steps from {TOTAL_STEPS} on" in result.stderr, result.stderr + result.stdout
    info = json.loads((run_dir / "run.json").read_text())
    assert info["versions"]["harness"] == "0.0.1" and info["resumes"][-1]["versions"] == {"harness": __version__}


def test_no_checkpoint_restores_is_refused_not_restarted(uninterrupted, tmp_path):
    run_dir = copy_run(uninterrupted, tmp_path / "run", TOTAL_STEPS)
    for data in (run_dir / "checkpoints").glob("ckpt-*.data-*"):
        data.write_bytes(b"not a checkpoint")
    before = (run_dir / "losses.csv").read_bytes()
    result = run_main("resume", run_dir)
    assert result.returncode == 2 and "refusing to restart from step 0" in result.stderr
    assert (run_dir / "losses.csv").read_bytes() == before, "nothing the user had is lost"


def test_changed_config_is_refused_with_what_differs(uninterrupted, tmp_path):
    run_dir = copy_run(uninterrupted, tmp_path / "run", 8)
    text = (run_dir / "config.yaml").read_text().replace("learning_rate: 0.01", "learning_rate: 0.02")
    (run_dir / "config.yaml").write_text(text)
    result = run_main("resume", run_dir)
    assert result.returncode == 2, result.stderr
    assert "models.1.optimizer.learning_rate: 0.01 -> 0.02" in result.stderr


def test_locked_run_exits_5_naming_the_holder(uninterrupted, tmp_path):
    run_dir = copy_run(uninterrupted, tmp_path / "run", 8)
    with FolderLock(run_dir):
        result = run_main("resume", run_dir)
    assert result.returncode == 5, result.stderr
    assert f"pid {os.getpid()}" in result.stderr and "since" in result.stderr


def test_lock_of_a_killed_process_is_taken_over(uninterrupted, tmp_path):
    run_dir = copy_run(uninterrupted, tmp_path / "run", 20)
    holder = subprocess.Popen(
        [sys.executable, "-c", f"from harness.rundir import FolderLock; import time; FolderLock({str(run_dir)!r}).acquire(); print('locked', flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE, text=True,
    )
    assert holder.stdout.readline().strip() == "locked"
    holder.kill()
    holder.wait()
    result = run_cli("resume", run_dir)
    assert result.returncode == 0, result.stderr


def test_resume_of_a_completed_run_does_nothing(uninterrupted):
    before = (uninterrupted / "losses.csv").read_bytes()
    result = run_main("resume", uninterrupted)
    assert result.returncode == 0 and "already completed" in result.stderr
    assert (uninterrupted / "losses.csv").read_bytes() == before


def test_exported_models_load_with_plain_tf_keras_and_predict_the_same(uninterrupted, tmp_path):
    images = np.random.default_rng(0).uniform(size=(2, 16, 16, 3)).astype("float32")
    np.save(tmp_path / "images.npy", images)
    script = (
        "import os, sys, numpy as np\n"
        "assert 'harness' not in sys.modules\n"
        "import tf_keras\n"
        f"m = tf_keras.models.load_model({str(uninterrupted / 'models' / 'unet' / 'model.keras')!r}, compile=False)\n"
        f"np.save({str(tmp_path / 'plain.npy')!r}, m.predict(np.load({str(tmp_path / 'images.npy')!r}), verbose=0))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TF_USE_LEGACY_KERAS"] = "1"
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    expected = load_exported(uninterrupted, "unet")(images, training=False).numpy()
    np.testing.assert_array_equal(np.load(tmp_path / "plain.npy"), expected)
    best = json.loads((uninterrupted / "models" / "unet" / "best.json").read_text())
    assert best["step"] in (4, 8, 12, 16, 20, 24) and (uninterrupted / "models" / "unet" / "best.keras").exists()


def test_disk_full_exits_4_and_the_last_checkpoint_still_restores(uninterrupted, tmp_path):
    mount = tmp_path / "small_disk"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        results = mount / "r"
        process = start_cli("run", write_yaml(tmp_path / "c.yaml", KILL_CONFIG), "--results", results)
        deadline = time.monotonic() + 120
        while not list((results / "tiny").glob("*/checkpoints/ckpt-*.index")) if (results / "tiny").exists() else True:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        filler = mount / "filler"
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=64k"], capture_output=True)  # fill the disk
        _, stderr = process.communicate(timeout=120)
        assert process.returncode == 4, stderr
        assert "disk full" in stderr and str(results) in stderr and "out of memory" not in stderr
        assert "Traceback" not in stderr
        filler.unlink()
        run_dir = only_run_dir(results)
        resumed = run_cli("resume", run_dir)
        assert resumed.returncode == 0, resumed.stderr
        assert (run_dir / "losses.csv").read_bytes() == (uninterrupted / "losses.csv").read_bytes()
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_out_of_memory_and_disk_full_are_told_apart():
    from harness.training.failures import translate as _translate

    oom = tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor with shape[64,512,512]")
    disk = tf.errors.ResourceExhaustedError(None, None, "results/x/ckpt-4_temp/part; No space left on device")
    assert "out of memory" in str(_translate(oom, Path("run")))
    assert "disk full" in str(_translate(disk, Path("run")))
    assert _translate(OSError(28, "No space left on device", "losses.csv"), Path("run")).exit_code == 4
    # What TensorFlow 2.21 raises writing a checkpoint to a full disk: the op's wrapping took the
    # 200 characters quoted, and "No space left on device" was cut off.
    wrapped = ("{{function_node __wrapped__SaveV2_dtypes_171_device_/job:localhost/replica:0/task:0/device:CPU:0}} "
               "/r/smoke/20261128-224225/checkpoints/ckpt-24_temp/part-00000-of-00001.data-00000-of-00001.tempstate5903182947269737663; "
               "No space left on device [Op:SaveV2]")
    said = str(_translate(tf.errors.ResourceExhaustedError(None, None, wrapped), Path("run")))
    assert "(/r/smoke/20261128-224225/checkpoints/ckpt-24_temp/part-00000-of-00001" in said and "; No space left on device)" in said
    assert "function_node" not in said and "[Op:" not in said
