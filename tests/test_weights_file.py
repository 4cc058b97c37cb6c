"""A model's `weights:` file: what it may be (a .h5 or .keras file, a TensorFlow checkpoint's
prefix), that the model starts from it, and that pretrained weights to download are refused
before anything is made, pointing to the way to use them offline."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from pathlib import Path

from conftest import REPO, Killed, killed_in_save, run_main, tiny_config, write_yaml

from harness.config.loading import validate_config
from harness.errors import ConfigError, DataError
from harness.members.zoo import build_model, weights_digest


def _problems(raw) -> list[str]:
    with pytest.raises(ConfigError) as info:
        validate_config(raw)
    return info.value.problems


def _same(a, b) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("name", ["w.h5", "m.keras", "ckpt"])
def test_a_model_starts_from_its_weights_file_in_each_format_load_weights_reads(tmp_path, name):
    saved = build_model("tiny_fcn", None, {}, (16, 16, 3), 1)
    path = tmp_path / name
    saved.save(str(path)) if name.endswith(".keras") else saved.save_weights(str(path))  # "ckpt": ckpt.index, ckpt.data-*
    raw = tiny_config()
    raw["models"][0]["weights"] = str(path)
    spec = validate_config(raw).models[0]  # a checkpoint's prefix is no file, and was refused as missing
    fresh = build_model("tiny_fcn", None, {}, (16, 16, 3), 1)
    loaded = build_model("tiny_fcn", None, {}, (16, 16, 3), 1, weights=spec.weights)
    assert not _same(fresh.get_weights(), saved.get_weights())  # a fresh build draws other weights
    assert _same(loaded.get_weights(), saved.get_weights())


def test_weights_imagenet_is_refused_saying_nothing_is_downloaded(tmp_path):
    raw = tiny_config(models=[{"name": "u", "arch": "Unet", "backbone": "resnet18", "weights": "imagenet"}], data={"image_size": 32})
    (problem,) = _problems(raw)
    assert problem.startswith(f"models.0(u).weights: weights file 'imagenet' does not exist (a relative path is read from the current folder, {os.getcwd()}); weights is a file you have")
    assert "harness downloads nothing" in problem and "Pretrained weights" in problem
    raw["models"][0]["weights"] = str(tmp_path / "nope.h5")  # a file's name: only that it is missing
    (problem,) = _problems(raw)
    assert problem.endswith("nope.h5' does not exist")


def test_an_encoder_to_download_is_refused_before_anything_is_made(tmp_path):
    """segmentation-models' encoder_weights: 'imagenet' went through `options` to the builder, which
    tried to download the encoder at build time: offline, an internal error (exit 1) in a failed run."""
    raw = tiny_config(models=[{"name": "u", "arch": "Unet", "backbone": "resnet18", "options": {"encoder_weights": "imagenet"}}], data={"image_size": 32})
    (problem,) = _problems(raw)
    assert problem.startswith("models.0(u): options.encoder_weights 'imagenet': segmentation-models would download these weights")
    assert "`weights: PATH`" in problem
    raw["models"][0]["options"] = {"encoder_weights": None}  # the default, said out loud
    assert validate_config(raw).models[0].options == {"encoder_weights": None}
    raw["models"][0]["options"] = {"encoder_weights": "imagenet"}
    config = write_yaml(tmp_path / "c.yaml", raw)
    result = run_main("run", str(config), "--results", str(tmp_path / "results"))
    assert result.returncode == 2 and "options.encoder_weights" in result.stderr and not (tmp_path / "results").exists()


@pytest.mark.slow
def test_the_documented_recipe_for_pretrained_weights_loads_into_harnesss_model(tmp_path):
    """docs/members.md, "Pretrained weights": a segmentation-models network saved by plain sm (its
    default input (None, None, 3)) loads into the model harness builds at the run's image size.
    Here with encoder_weights=None, as nothing may be downloaded; 'imagenet' changes only the values."""
    path = tmp_path / "unet_resnet18.h5"
    script = ('import segmentation_models as sm\n'
              f'sm.Unet("resnet18", encoder_weights=None, classes=1, activation="sigmoid").save_weights({str(path)!r})\n')
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "SM_FRAMEWORK": "tf.keras"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    import h5py

    with h5py.File(path) as saved:
        arrays = [saved[layer][name][()] for layer in saved.attrs["layer_names"] for name in saved[layer].attrs["weight_names"]]
    model = build_model("Unet", "resnet18", {}, (64, 64, 3), 1, weights=path)
    assert len(arrays) == len(model.weights) == 148
    assert _same([w.numpy() for w in model.weights], arrays)


def test_a_file_of_another_shape_is_refused_naming_what_the_model_was_built_for(tmp_path):
    path = tmp_path / "one_class.h5"
    build_model("tiny_fcn", None, {}, (16, 16, 3), 1).save_weights(str(path))
    with pytest.raises(ConfigError) as info:
        build_model("tiny_fcn", None, {}, (16, 16, 3), 3, weights=path)
    message = str(info.value)
    assert message.startswith(f"cannot load weights file {str(path)!r} into tiny_fcn for 3 class(es) on 3-channel images: ")
    assert message.endswith("(the file must be of the same architecture, backbone, classes and image channels)")


def _with_weights(weights: Path) -> dict:
    raw = tiny_config()
    raw["models"][0]["weights"] = str(weights)
    return raw


@pytest.mark.slow
def test_a_resume_from_step_0_refuses_a_weights_file_changed_since_the_run_started(tmp_path, monkeypatch):
    """Killed in its first save, a run resumes from step 0 and builds its models again from their
    weights files: one overwritten in between would have started it from other weights, silently."""
    import json

    from harness.api import resume, run

    weights = tmp_path / "fcn.h5"
    build_model("tiny_fcn", None, {}, (16, 16, 3), 1).save_weights(str(weights))
    started = weights_digest(weights)
    config = validate_config(_with_weights(weights))
    with monkeypatch.context() as patch:
        killed_in_save(patch, 4)  # the first save, at the first epoch end
        with pytest.raises(Killed):
            run(config, results_dir=tmp_path / "r")
    (run_dir,) = (tmp_path / "r" / "tiny").iterdir()
    record = json.loads((run_dir / "run.json").read_text())
    assert record["weights_files"] == {str(weights): started} and record["checkpoints"] == []
    build_model("tiny_fcn", None, {}, (16, 16, 3), 1).save_weights(str(weights))  # other weights, the same name
    with pytest.raises(DataError) as refused:
        resume(run_dir)
    assert "1 weights file(s) changed since this run started, and it has no checkpoint yet" in str(refused.value)
    assert refused.value.problems == [str(weights)]
    done = resume(run_dir, accept_changed_data=True)
    assert done.info["status"] == "completed"
    assert json.loads((run_dir / "run.json").read_text())["weights_files"] == {str(weights): weights_digest(weights)} != {str(weights): started}
