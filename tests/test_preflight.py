"""Checks that need no TensorFlow answer before it is imported: each case runs the real CLI with a
`tensorflow` on the path that refuses to be imported, so the expected message and exit code show
that the check came first."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO, run_cli, tiny_config, write_yaml
from PIL import Image
from pictures import write_folder

POISON = "raise ImportError('tensorflow was imported before the check')\n"


def no_tensorflow(tmp_path) -> dict:
    poisoned = tmp_path / "poisoned"
    for name in ("tensorflow", "tf_keras"):
        (poisoned / name).mkdir(parents=True)
        (poisoned / name / "__init__.py").write_text(POISON)
    return {"PYTHONPATH": f"{poisoned}:{REPO / 'tests'}"}


def test_the_preflight_module_imports_no_tensorflow():
    code = "import sys, harness.training.preflight, harness.api; sys.exit('tensorflow' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO).returncode == 0


def folder_config(tmp_path, images, masks, **models):
    raw = tiny_config(data={"source": "folder", "images": str(images), "masks": str(masks), "image_size": [16, 16], "batch_size": 2, "train_size": None, "val_size": None})
    if models:
        raw["models"] = [models]
    return write_yaml(tmp_path / "c.yaml", raw)


def test_masks_of_the_wrong_size_are_named_before_tensorflow(tmp_path):
    images, masks = write_folder(tmp_path / "data", 8, size=(16, 16))
    Image.fromarray(np.zeros((20, 20), np.uint8)).save(masks / "ex02.png")
    result = run_cli("run", folder_config(tmp_path, images, masks), "--results", tmp_path / "r", env=no_tensorflow(tmp_path))
    assert result.returncode == 3, result.stderr
    assert "ex02" in result.stderr and "tensorflow was imported" not in result.stderr


def test_a_missing_image_folder_is_named_before_tensorflow(tmp_path):
    images, masks = write_folder(tmp_path / "data", 8, size=(16, 16))
    result = run_cli("run", folder_config(tmp_path, tmp_path / "nowhere", masks), "--results", tmp_path / "r", env=no_tensorflow(tmp_path))
    assert result.returncode in (2, 3), result.stderr
    assert "nowhere" in result.stderr and "tensorflow was imported" not in result.stderr


@pytest.mark.parametrize("command", ["run", "plan", "nightly"])
def test_a_module_path_that_does_not_exist_is_named_before_tensorflow(tmp_path, command):
    raw = tiny_config(models=[{"name": "mine", "arch": "my_models.nets:build"}, {"name": "odd", "kind": "factories_typo:Kind", "arch": "tiny_fcn"}])
    result = run_cli(command, write_yaml(tmp_path / "c.yaml", raw), "--results", tmp_path / "r", env=no_tensorflow(tmp_path))
    assert result.returncode == 2, result.stderr
    assert "models.0(mine).arch: cannot find module 'my_models.nets'" in result.stderr
    assert "models.1(odd).kind: cannot find module 'factories_typo'" in result.stderr
    assert "tensorflow was imported" not in result.stderr
    assert not (tmp_path / "r").exists()  # no experiment folder, no history, for a config that cannot run


def test_an_extra_the_config_asks_for_and_is_not_installed_is_named_before_tensorflow(tmp_path):
    # Without MLflow, output.mlflow stopped the run after TensorFlow's import and the build, in a
    # failed run directory of its own; a nightly had registered tonight's run first.
    env = no_tensorflow(tmp_path)
    env["PYTHONPATH"] += f":{tmp_path / 'blocker'}"
    (tmp_path / "blocker").mkdir()  # as if neither were installed: Python's way of blocking an import
    (tmp_path / "blocker" / "sitecustomize.py").write_text("import sys\nsys.modules['mlflow'] = None\nsys.modules['ray'] = None\n")
    raw = tiny_config(output={"mlflow": {"tracking_uri": f"file:{tmp_path / 'mlruns'}"}}, placement={"engine": "ray"})
    config = write_yaml(tmp_path / "c.yaml", raw)
    for command in ("run", "nightly"):
        result = run_cli(command, config, "--results", tmp_path / "r", env=env)
        assert result.returncode == 2, result.stderr
        assert 'output.mlflow is set but mlflow is not installed: pip install "harness[mlflow]"' in result.stderr
        assert 'placement.engine: ray but ray is not installed: pip install "harness[ray]"' in result.stderr
        assert "tensorflow was imported" not in result.stderr and not (tmp_path / "r").exists()


def test_resuming_a_locked_run_is_refused_before_tensorflow(tmp_path):
    import fcntl
    import json
    import os

    run_dir = tmp_path / "r" / "tiny" / "20260101-000000"
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"status": "interrupted"}))
    fd = os.open(run_dir / ".lock", os.O_RDWR | os.O_CREAT)
    os.write(fd, json.dumps({"pid": 4242, "host": "elsewhere", "since": "2026-01-01T00:00:00Z", "purpose": "run"}).encode())
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        result = run_cli("resume", run_dir, env=no_tensorflow(tmp_path))
    finally:
        os.close(fd)
    assert result.returncode == 5, result.stderr
    assert "pid 4242 on host elsewhere" in result.stderr and "tensorflow was imported" not in result.stderr


def test_resuming_a_folder_that_is_not_a_run_is_refused_before_tensorflow(tmp_path):
    result = run_cli("resume", tmp_path, env=no_tensorflow(tmp_path))
    assert result.returncode == 2 and "is not a run directory (no run.json)" in result.stderr, result.stderr


def test_resuming_a_run_whose_code_cannot_be_found_is_refused_before_tensorflow(tmp_path):
    run_dir = tmp_path / "r" / "tiny" / "20260101-000000"
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text('{"status": "interrupted"}')
    write_yaml(run_dir / "config.yaml", tiny_config(models=[{"name": "mine", "arch": "my_models.nets:build"}]))
    result = run_cli("resume", run_dir, env=no_tensorflow(tmp_path))
    assert result.returncode == 2, result.stderr
    assert "models.0(mine).arch: cannot find module 'my_models.nets'" in result.stderr and "tensorflow was imported" not in result.stderr


def test_a_module_named_by_its_file_or_left_in_the_current_folder_gets_the_fix(tmp_path, monkeypatch):
    """The two slips behind most "cannot find module" messages: `mymodels.py:net` (a file's name
    where a module's is due) and a `mymodels.py` beside the user, which the `harness` command,
    unlike `python -m harness`, does not import from."""
    from harness.config.loading import validate_config
    from harness.errors import ConfigError
    from harness.training.preflight import _where_to_look, check_module_paths

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mymodels.py").write_text("")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    assert _where_to_look("mymodels", "mymodels:net").startswith("mymodels.py is in the current folder")
    assert "PYTHONPATH=. harness" in _where_to_look("mymodels", "mymodels:net")
    assert _where_to_look("pkg.nets", "pkg.nets:net").startswith("is its folder on PYTHONPATH")  # pkg/nets.py is not there
    assert _where_to_look("pkg", "pkg:net").startswith("pkg/ is in the current folder")
    config = validate_config(tiny_config(models=[{"name": "mine", "arch": "mymodels.py:net"}]))
    try:
        check_module_paths(config)
    except ConfigError as refused:
        assert "name the module, not its file: mymodels:net" in str(refused)
    else:
        raise AssertionError("a file's name as a module was not refused")
