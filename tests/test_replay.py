"""Reproducing a member by hand: `harness export-batches` writes what a run's members saw and
started from, and the loop docs/reproduce.md shows (run here exactly as written there) trains a
member to the run's losses and final weights, bit for bit."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
from conftest import page_blocks, run_cli, run_main, tiny_config, write_yaml

from harness.core.backend import import_keras
from harness.rundir import read_csv

keras = import_keras()


def documented_loop() -> str:
    (code,) = page_blocks("docs/reproduce.md", "python")
    return code


def test_the_documented_loop_is_about_thirty_lines():
    assert len([l for l in documented_loop().splitlines() if l.strip()]) <= 32


def test_the_documented_hand_loop_reproduces_a_real_run_bit_for_bit(tmp_path):
    raw = tiny_config(output={"probe_steps": 0, "progress": "none", "serve_probe": False})
    result = run_cli("run", write_yaml(tmp_path / "c.yaml", raw), "--results", tmp_path / "r")
    assert result.returncode == 0, result.stderr
    (run_dir,) = (tmp_path / "r" / "tiny").iterdir()
    exported = run_cli("export-batches", run_dir, "--steps", 8)
    assert exported.returncode == 0, exported.stderr
    replay = run_dir / "replay"
    facts = json.loads((replay / "members.json").read_text())
    assert set(facts) == {"fcn", "unet", "deconv"} and np.load(replay / "batches.npz")["images"].shape == (8, 4, 16, 16, 3)
    loop = tmp_path / "loop.py"
    loop.write_text(documented_loop())
    losses = read_csv(run_dir / "losses.csv", dtype={"value": str}).query("split == 'train' and metric == 'loss'")
    for name in ("fcn", "deconv"):  # bce+dice with adam; focal+dice with sgd and momentum
        done = subprocess.run([sys.executable, str(loop), str(replay), name], capture_output=True, text=True, timeout=600, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        by_hand = [line.split()[1] for line in done.stdout.splitlines() if re.match(r"^\d+ ", line)]
        assert by_hand == losses[losses["model"] == name].sort_values("step")["value"].tolist(), name
        trained = keras.models.load_model(replay / f"{name}-by-hand.keras", compile=False).get_weights()
        exported_model = keras.models.load_model(run_dir / "models" / name / "model.keras", compile=False).get_weights()
        assert all(np.array_equal(a, b) for a, b in zip(trained, exported_model, strict=True)), name


def test_export_batches_of_a_folder_that_is_not_a_run_says_so(tmp_path):
    result = run_main("export-batches", tmp_path, "--steps", 2)
    assert result.returncode == 2 and f"{tmp_path} is not a run directory (no run.json)" in result.stderr


def test_export_batches_refuses_data_that_changed_since_the_run(tmp_path):
    """A file edited in place after the run was read as it is now: the batches written were not
    the ones the members saw, and a hand loop over them missed the run's losses without a word."""
    from PIL import Image
    from pictures import write_folder

    images, masks = write_folder(tmp_path, 10, size=(16, 16))
    raw = tiny_config(data={"source": "folder", "images": str(images), "masks": str(masks), "image_size": [16, 16], "batch_size": 2,
                            "train_size": None, "val_size": None, "val_fraction": 0.3}, output={"probe_steps": 0, "progress": "none", "serve_probe": False})
    raw["train"]["epochs"] = 1
    assert run_main("run", write_yaml(tmp_path / "c.yaml", raw), "--results", tmp_path / "r").returncode == 0
    (run_dir,) = (tmp_path / "r" / "tiny").glob("2*")
    assert run_main("export-batches", run_dir, "--steps", 2).returncode == 0  # the data as the run saw it
    before = (run_dir / "replay" / "batches.npz").read_bytes()
    edited = images / "ex03.png"
    Image.fromarray(255 - np.asarray(Image.open(edited))).save(edited)
    refused = run_main("export-batches", run_dir, "--steps", 2)
    assert refused.returncode == 3, refused.stderr
    assert "would not be the ones the run's members saw" in refused.stderr and f"changed: {edited}" in refused.stderr, refused.stderr
    assert (run_dir / "replay" / "batches.npz").read_bytes() == before  # what the user had is kept
    refused = run_main("export-batches", run_dir, "--steps", 2, "--out", tmp_path / "fresh")
    assert refused.returncode == 3 and not (tmp_path / "fresh").exists()  # no empty folder of its own left behind
    # A resume that went on on the changed files (--accept-changed-data) records them as the data:
    # exported again, the batches are today's files, and the steps before that resume saw others.
    fingerprint = json.loads((run_dir / "data_fingerprint.json").read_text())
    (run_dir / "data_fingerprint.json").write_text(json.dumps({**fingerprint, "items": {**fingerprint["items"], **_fingerprints_now(raw, tmp_path / "r")},
                                                              "accepted_change_at": "2026-11-29T02:00:00+00:00"}))
    warned = run_main("export-batches", run_dir, "--steps", 2)
    assert warned.returncode == 0 and "resumed on changed data (accepted 2026-11-29T02:00:00+00:00)" in warned.stderr, warned.stderr


def _fingerprints_now(raw: dict, results) -> dict:
    from harness.config.loading import validate_config
    from harness.training.preflight import resolve_data_sizes

    _, scan = resolve_data_sizes(validate_config(raw), results, 1, say=False)
    return scan.fingerprints
