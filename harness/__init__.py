"""harness: train several models together, on the same batches, in one compiled TensorFlow step.

    import harness
    config = harness.load_config("experiments/smoke.yaml", overrides=["train.epochs=2"])
    result = harness.run(config)
    result.summary      # pandas DataFrame, one row per model
    result.losses       # tidy DataFrame: step, epoch, model, split, metric, value

Importing harness selects tf_keras (legacy Keras 2) for TensorFlow; import it before tensorflow.
"""

from harness.core.backend import import_keras, import_tf, select_legacy_keras

select_legacy_keras()

__version__ = "0.3.9"  # raised when what a run computes changes: run.json records it, compare and nightly name a change
__all__ = ["load_config", "run", "plan", "resume", "load_run", "nightly", "history", "compare", "compare_pairs", "import_tf", "import_keras", "__version__"]


def __getattr__(name):
    # The API pulls in TensorFlow; `harness --help` and config checks should not pay for that.
    if name in ("run", "plan", "resume", "load_run", "load_config", "nightly", "history", "compare", "compare_pairs"):
        from harness import api

        return getattr(api, name)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")
