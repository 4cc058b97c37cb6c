"""The model files a run writes (harness/training/export.py): the `.keras` format whichever thread
writes them, as a run started from a worker thread through the Python API does."""

from __future__ import annotations

import threading
import zipfile

from harness.core.backend import import_keras
from harness.training.export import export_model


def test_models_written_from_another_thread_are_keras_files_not_hdf5(tmp_path):
    # tf_keras keeps "save as .keras" in a per-thread flag that its first save in a new thread
    # leaves off: the second file (best.keras after model.keras, the next member) came out HDF5.
    keras = import_keras()
    written: list = []

    def write_three():
        model = keras.Sequential([keras.layers.Dense(2, input_shape=(3,))])
        for name in ("model", "best", "other"):
            export_model(model, tmp_path / name / f"{name}.keras")
            written.append(tmp_path / name / f"{name}.keras")

    thread = threading.Thread(target=write_three)
    thread.start()
    thread.join()
    assert len(written) == 3 and all(zipfile.is_zipfile(path) for path in written)
    reloaded = keras.models.load_model(written[-1], compile=False)
    assert reloaded.count_params() == 8
