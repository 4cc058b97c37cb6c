""".keras files read with their weights copied out of the archive (harness/core/keras_files.py):
the same model as tf_keras's `load_model` gives, in the same safe mode."""

from __future__ import annotations

import tempfile

import numpy as np
import pytest

from harness.core import keras_files
from harness.core.backend import import_keras
from harness.core.keras_files import load_keras_model, load_keras_weights
from harness.members.zoo import build_model
from harness.training.export import export_model


def _shared_and_nested():
    """A model with a layer used twice and a model inside it: what Keras's object sharing keeps."""
    keras = import_keras()
    inner_in = keras.Input((8, 8, 2))
    inner = keras.Model(inner_in, keras.layers.Conv2D(2, 3, padding="same")(inner_in), name="inner")
    inputs = keras.Input((8, 8, 2))
    shared = keras.layers.Dense(2, name="shared")
    return keras.Model(inputs, shared(inner(shared(inputs))), name="outer")


@pytest.mark.parametrize("make", [pytest.param(lambda: build_model("Unet", "resnet18", {}, (32, 32, 3), 1), marks=pytest.mark.slow),  # 11 s
                                  _shared_and_nested], ids=["unet", "shared"])
def test_a_model_file_loads_as_tf_keras_loads_it_without_load_model(make, tmp_path, monkeypatch):
    keras = import_keras()
    model = make()
    rng = np.random.default_rng(0)
    # weights unlike any new model's (BatchNorm's variances stay positive)
    model.set_weights([(w * rng.uniform(0.9, 1.1, w.shape) + 0.01 * rng.normal(size=w.shape)).astype(w.dtype) for w in model.get_weights()])
    path = tmp_path / "model.keras"
    export_model(model, path)
    expected = keras.models.load_model(path, compile=False, safe_mode=True)

    def refused(*args, **kwargs):
        raise AssertionError("read through tf_keras's load_model")

    monkeypatch.setattr(keras.models, "load_model", refused)
    loaded = load_keras_model(path)
    assert [w.name for w in loaded.weights] == [w.name for w in expected.weights]
    assert all(np.array_equal(a, b) for a, b in zip(loaded.get_weights(), expected.get_weights()))
    images = rng.random((2, *model.input_shape[1:]), dtype=np.float32)
    assert np.isfinite(expected(images, training=False).numpy()).all()
    assert np.array_equal(loaded(images, training=False).numpy(), expected(images, training=False).numpy())
    assert len(loaded.layers) == len(expected.layers) and loaded.optimizer is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.keras"]  # the copied weights removed


def test_a_lambda_layer_is_refused_as_safe_mode_refuses_it(tmp_path):
    keras = import_keras()
    inputs = keras.Input((4,))
    path = tmp_path / "unsafe.keras"
    keras.Model(inputs, keras.layers.Lambda(lambda x: x * 2.0)(inputs)).save(str(path), save_format="keras")
    with pytest.raises(ValueError, match="safe_mode"):
        load_keras_model(path)


def test_weights_are_read_into_a_built_model_from_a_folder_that_cannot_be_written(tmp_path, monkeypatch):
    keras = import_keras()
    model = keras.Sequential([keras.layers.Dense(3, input_shape=(4,))])
    path = tmp_path / "best.keras"
    export_model(model, path)
    saved = model.get_weights()
    model.set_weights([np.zeros_like(w) for w in saved])
    real = tempfile.TemporaryDirectory

    def unwritable_beside(dir=None, **kwargs):
        if dir == tmp_path:
            raise PermissionError(f"{dir}: read-only")
        return real(dir=dir, **kwargs)

    monkeypatch.setattr(keras_files.tempfile, "TemporaryDirectory", unwritable_beside)
    load_keras_weights(model, path)
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), saved))
