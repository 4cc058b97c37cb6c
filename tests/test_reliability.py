"""Failures a stress run found, each injected the way it arrives: a kill inside a checkpoint save;
checkpoints deleted, replaced or copied in from another run; a full disk; bad manifests, arrays
and links; file modes; code named by a run directory."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
from pathlib import Path

import numpy as np
import pytest
from conftest import Killed, killed_in_save, run_cli, tiny_config, write_yaml

from harness import cli
from harness.api import resume, run
from harness.config.loading import validate_config
from harness.data.resolve import resolve_data
from harness.errors import ConfigError, DataError, LockedError
from harness.rundir import layout as rundir  # where the run directory and run.json are written
from harness.rundir import read_csv

# 8 steps, a checkpoint every 2, only the newest kept.
RAW = tiny_config(train={"epochs": 2, "steps_per_call": 2, "checkpoint_every_steps": 2, "keep_checkpoints": 1, "deterministic": True})


def the_run(results: Path) -> Path:
    (run_dir,) = (results / "tiny").iterdir()
    return run_dir


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    with_plots = {**RAW, "output": {**RAW["output"], "plot_formats": ["png"]}}  # the report tests rebuild samples.png
    return run(validate_config(with_plots), results_dir=tmp_path_factory.mktemp("clean")).run_dir


@pytest.fixture(scope="module")
def other_seed(tmp_path_factory) -> Path:
    return run(validate_config({**RAW, "seed": 4}), results_dir=tmp_path_factory.mktemp("other")).run_dir


@pytest.fixture
def killed_at_6(tmp_path, monkeypatch) -> Path:
    """A run killed inside its save at step 6: its own completed checkpoint is ckpt-4."""
    with monkeypatch.context() as patch:
        killed_in_save(patch, 6)
        with pytest.raises(Killed):
            run(validate_config(RAW), results_dir=tmp_path / "r")
    run_dir = the_run(tmp_path / "r")
    assert json.loads((run_dir / "run.json").read_text())["checkpoints"] == [4]
    return run_dir


@pytest.mark.slow
def test_a_kill_during_the_first_save_restarts_from_step_0(tmp_path, monkeypatch, capfd, clean):
    empty_index = lambda directory, step: (directory / f"ckpt-{step}.index").write_bytes(b"")  # noqa: E731
    with monkeypatch.context() as patch:
        killed_in_save(patch, 2, damage=empty_index)
        with pytest.raises(Killed):
            run(validate_config(RAW), results_dir=tmp_path / "r")
    run_dir = the_run(tmp_path / "r")
    assert (run_dir / "checkpoints" / "ckpt-2.index").stat().st_size == 0
    capfd.readouterr()
    resumed = resume(run_dir)
    err = capfd.readouterr().err
    assert "no checkpoint of this run was completed" in err and "starting from step 0" in err
    assert resumed.info["status"] == "completed" and resumed.info["steps_done"] == 8
    assert (run_dir / "losses.csv").read_bytes() == (clean / "losses.csv").read_bytes()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["deleted", "emptied"])
def test_checkpoints_removed_after_progress_are_refused_not_restarted(killed_at_6, how):
    folder = killed_at_6 / "checkpoints"
    shutil.rmtree(folder)
    if how == "emptied":
        folder.mkdir()
    rows = (killed_at_6 / "losses.csv").read_bytes()
    with pytest.raises(ConfigError) as info:
        resume(killed_at_6)
    text = info.value.render()
    assert "completed checkpoints at step(s) 4" in text and "ckpt-4: its files are missing" in text
    assert "refusing to restart from step 0" in text and f"harness run {killed_at_6 / 'config.yaml'}" in text
    assert (killed_at_6 / "losses.csv").read_bytes() == rows  # nothing the user had is lost


@pytest.mark.slow
def test_checkpoints_folder_replaced_by_a_file_is_refused_before_training(killed_at_6):
    folder = killed_at_6 / "checkpoints"
    shutil.rmtree(folder)
    folder.write_text("not a folder")
    with pytest.raises(ConfigError, match="is a file, not the run's checkpoints folder"):
        resume(killed_at_6)
    assert folder.read_text() == "not a folder"


@pytest.mark.slow
def test_a_stray_newer_checkpoint_neither_restores_nor_deletes_the_runs_own(killed_at_6, other_seed, clean, capfd):
    folder = killed_at_6 / "checkpoints"
    for file in (other_seed / "checkpoints").glob("ckpt-8.*"):
        shutil.copy(file, folder / file.name.replace("ckpt-8", "ckpt-999"))
    resumed = resume(killed_at_6)
    assert "from step 4 (ckpt-4)" in capfd.readouterr().err
    assert resumed.info["checkpoints"] == [8]  # keep_checkpoints: 1 of the run's own
    assert sorted(p.name.split(".")[0] for p in folder.glob("ckpt-*.index")) == ["ckpt-8", "ckpt-999"]
    assert (killed_at_6 / "losses.csv").read_bytes() == (clean / "losses.csv").read_bytes()


@pytest.mark.slow
def test_a_checkpoint_of_another_run_is_refused_by_name(killed_at_6, other_seed):
    folder = killed_at_6 / "checkpoints"
    for file in folder.glob("ckpt-4.*"):
        file.unlink()
    for file in (other_seed / "checkpoints").glob("ckpt-8.*"):  # the other run's, renamed as ours
        shutil.copy(file, folder / file.name.replace("ckpt-8", "ckpt-4"))
    with pytest.raises(ConfigError) as info:
        resume(killed_at_6)
    assert "ckpt-4: belongs to another run" in info.value.render()


# ---------------------------------------------------------------------------------------------
# 6. A full disk before (and after) the first write


def disk_full_for(monkeypatch, should_fail):
    """ENOSPC from every atomic write whose (path, text) `should_fail` picks, as the kernel says it."""
    real = rundir.atomic_write_text

    def full(path, text):
        if should_fail(Path(path), text):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, text)

    monkeypatch.setattr(rundir, "atomic_write_text", full)


def test_a_write_the_disk_refuses_names_the_file_it_was_for(tmp_path, monkeypatch):
    """A full disk fails write() or fsync() with no file name (OSError(28, ...)): the end of a
    smoke run on a 1.9 MB tmpfs said "disk full while writing <run folder>", not report.html."""
    from harness.rundir import files

    report = tmp_path / "report.html"
    report.write_text("the old report")

    def refused(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", refused)
    with pytest.raises(OSError) as info:
        files.atomic_write_text(report, "the new report")
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(report)
    assert report.read_text() == "the old report" and sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]

    def no_new_file(**where):  # a folder that refuses a new file names the temporary one
        raise PermissionError(errno.EACCES, "Permission denied", str(Path(where["dir"]) / ".report.html.x1y2.tmp"))

    monkeypatch.setattr(files.tempfile, "mkstemp", no_new_file)
    with pytest.raises(PermissionError) as info:
        files.atomic_write_text(report, "the new report")
    assert info.value.filename == str(report), "the file meant, not a temporary name the user never sees"


@pytest.mark.parametrize("first_write", ["config.yaml", "run.json"])
def test_disk_full_before_the_first_write_exits_4_and_leaves_nothing(tmp_path, monkeypatch, capsys, first_write):
    config = write_yaml(tmp_path / "c.yaml", RAW)
    disk_full_for(monkeypatch, lambda path, text: path.name == first_write)
    assert cli.main(["run", str(config), "--results", str(tmp_path / "r")]) == 4
    err = capsys.readouterr().err
    assert "disk full" in err and first_write in err and "Traceback" not in err
    assert list((tmp_path / "r" / "tiny").iterdir()) == []


@pytest.mark.slow
def test_disk_full_mid_run_says_run_json_is_stale_and_resume_says_so_too(tmp_path, monkeypatch, capsys, clean):
    config = write_yaml(tmp_path / "c.yaml", RAW)
    with monkeypatch.context() as patch:
        disk_full_for(patch, lambda path, text: path.name == "run.json" and '"steps_done": 4' in text)
        assert cli.main(["run", str(config), "--results", str(tmp_path / "r")]) == 4
    err = capsys.readouterr().err
    assert "run.json could not be updated, so it may still say status: running" in err
    run_dir = the_run(tmp_path / "r")
    assert json.loads((run_dir / "run.json").read_text())["status"] == "running"
    assert cli.main(["resume", str(run_dir)]) == 0
    assert "said running, but no process held the run" in capsys.readouterr().err
    assert (run_dir / "losses.csv").read_bytes() == (clean / "losses.csv").read_bytes()


# ---------------------------------------------------------------------------------------------
# 7-9. Bad data named, not crashed on


def data_config(tmp_path, data: dict):
    raw = tiny_config(data={"image_size": [16, 16], "batch_size": 2, "train_size": None, "val_size": None, **data})
    return validate_config(raw)


def write_pairs(folder: Path, count: int) -> tuple[Path, Path]:
    from PIL import Image

    images, masks = folder / "images", folder / "masks"
    images.mkdir(parents=True)
    masks.mkdir(parents=True)
    for i in range(count):
        Image.fromarray(np.full((16, 16, 3), 40 * i, np.uint8)).save(images / f"p{i}.png")
        Image.fromarray(np.eye(16, dtype=np.uint8) * 255).save(masks / f"p{i}.png")
    return images, masks


def test_bad_csv_manifests_name_the_file_and_line(tmp_path):
    write_pairs(tmp_path, 4)
    short = tmp_path / "short.csv"
    short.write_text("image,mask\nimages/p0.png,masks/p0.png\nimages/p1.png\nimages/p2.png,masks/p2.png\n")
    with pytest.raises(DataError) as info:
        resolve_data(data_config(tmp_path, {"source": "csv", "manifest": str(short)}))
    assert any(p.startswith(f"{short}:3: needs an image path and a mask path") for p in info.value.problems)
    latin = tmp_path / "latin.csv"
    latin.write_bytes("image,mask\nimages/p0.png,masks/p0.png\nimages/caf\xe9.png,masks/p1.png\n".encode("latin-1"))
    with pytest.raises(DataError, match=rf"{latin}:3: not UTF-8 text"):
        resolve_data(data_config(tmp_path, {"source": "csv", "manifest": str(latin)}))


def test_negative_integer_images_are_bad_data_with_the_range_found(tmp_path):
    images = np.zeros((6, 16, 16, 3), np.int16)
    images[2, 0, 0, 0] = -7
    images[2, 1, 1, 1] = 300
    np.save(tmp_path / "x.npy", images)
    np.save(tmp_path / "y.npy", np.zeros((6, 16, 16), np.uint8))
    with pytest.raises(DataError) as info:
        resolve_data(data_config(tmp_path, {"source": "arrays", "images": str(tmp_path / "x.npy"), "masks": str(tmp_path / "y.npy")}))
    assert info.value.problems == ["x.npy[2]: image values range -7..300: integer images must not be negative (they would wrap around as 8-bit); scale them to 0..255, or to floats in 0..1"]


def test_symlink_loops_and_dangling_links_are_named_as_bad_items(tmp_path):
    images, masks = write_pairs(tmp_path, 4)
    for folder in (images, masks):
        (folder / "loop.png").symlink_to(folder / "loop.png")
        (folder / "gone.png").symlink_to(tmp_path / "missing.png")
    with pytest.raises(DataError) as info:
        resolve_data(data_config(tmp_path, {"source": "folder", "images": str(images), "masks": str(masks)}))
    problems = "\n".join(info.value.problems)
    for folder in (images, masks):
        assert f"{folder / 'loop.png'}: a broken symbolic link (it loops back on itself)" in problems
        assert f"{folder / 'gone.png'}: a broken symbolic link (it points to {tmp_path / 'missing.png'}, which does not exist)" in problems


def test_an_empty_folder_is_named(tmp_path):
    (tmp_path / "i").mkdir()
    (tmp_path / "m").mkdir()
    with pytest.raises(DataError, match=f"no examples found in {tmp_path / 'i'}, {tmp_path / 'm'}"):
        resolve_data(data_config(tmp_path, {"source": "folder", "images": str(tmp_path / "i"), "masks": str(tmp_path / "m")}))


# ---------------------------------------------------------------------------------------------
# 10. Files others can read


@pytest.mark.slow
@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_written_files_follow_the_umask(tmp_path, umask):
    previous = os.umask(umask)
    try:
        run_dir = run(validate_config(tiny_config(train={"epochs": 1})), results_dir=tmp_path).run_dir
    finally:
        os.umask(previous)
    written = ["config.yaml", "run.json", "summary.csv", "pairs.csv", "report.html", "losses.csv", "checkpoints/checkpoint", "models/fcn/best.json"]
    modes = {name: stat.S_IMODE((run_dir / name).stat().st_mode) for name in written}
    assert modes == {name: 0o666 & ~umask for name in written}


# ---------------------------------------------------------------------------------------------
# 11. Reading a run directory runs none of its code


@pytest.mark.slow
def test_report_imports_nothing_a_run_directory_names(clean, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(clean, run_dir)
    marker = tmp_path / "ran.txt"
    (run_dir / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\ndef f(**kw): pass\nclass K: pass\n")
    config = (run_dir / "config.yaml").read_text()
    (run_dir / "config.yaml").write_text(config.replace("arch: tiny_fcn", "arch: evil:f").replace("kind: supervised", "kind: evil:K", 1))
    result = run_cli("report", ".", cwd=run_dir)  # the run folder is the current directory: first on sys.path
    assert result.returncode == 0, result.stderr
    assert not marker.exists(), "harness report imported a module the run directory names"
    assert "arch: evil:f" in (run_dir / "config.yaml").read_text()


@pytest.mark.slow
def test_a_model_file_refused_by_safe_mode_is_named_and_the_report_rebuilt_without_new_samples(clean, tmp_path, capsys):
    from harness.core.backend import import_keras

    keras = import_keras()
    run_dir = tmp_path / "run"
    shutil.copytree(clean, run_dir)
    inputs = keras.Input((16, 16, 3))
    unsafe = keras.Model(inputs, keras.layers.Lambda(lambda x: x[..., :1])(inputs))
    target = run_dir / "models" / "fcn" / "model.keras"
    unsafe.save(str(target), save_format="keras")
    samples = (run_dir / "plots" / "samples.png").read_bytes()
    (run_dir / "report.html").unlink()
    # Once exit 2 for the whole report: a run of a model with layers of the user's own could
    # never have its report rebuilt. The samples are the only part that needs the models.
    assert cli.main(["report", str(run_dir)]) == 0
    err = capsys.readouterr().err
    assert f"sample predictions not redrawn (plots/samples.png kept): {target} cannot be loaded safely" in err and "Traceback" not in err
    assert (run_dir / "report.html").exists() and (run_dir / "plots" / "samples.png").read_bytes() == samples


@pytest.mark.slow
def test_report_of_a_run_that_is_still_writing_is_refused(clean, tmp_path):
    from harness.outputs.derived import rebuild
    from harness.rundir import FolderLock

    run_dir = tmp_path / "run"
    shutil.copytree(clean, run_dir)
    with FolderLock(run_dir):
        with pytest.raises(LockedError, match="locked by another run"):
            rebuild(run_dir)


@pytest.mark.slow
def test_compare_prints_hostile_model_names_as_they_are(clean, tmp_path, capsys):
    from harness.outputs.compare import compare_runs, print_comparison

    run_dir = tmp_path / "results" / "tiny" / "run"
    shutil.copytree(clean, run_dir)
    summary = read_csv(run_dir / "summary.csv")
    summary["model"] = ["[/x]", "\x1b[31mred", "[bold]b"]
    summary.to_csv(run_dir / "summary.csv", index=False)
    print_comparison(compare_runs([run_dir]))
    out = capsys.readouterr().out
    assert "[/x]" in out and "[bold]b" in out and "\x1b[31m" not in out and "?[31mred" in out
