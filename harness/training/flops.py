"""Forward-pass FLOPs per example, counted by TensorFlow's profiler on the model's graph.

Counted once per model on a batch of one, in inference mode; a training step costs roughly three
times this (forward, and two matrix products per layer backward).
"""

from __future__ import annotations

import contextlib
import io
import logging

from harness.core.backend import import_tf
from harness.training.serve import inference_function

tf = import_tf()


def forward_flops(model, input_shape: tuple[int, ...]) -> int | None:
    """FLOPs of one example's forward pass, or None where the profiler cannot count them.
    `input_shape`: one image's (height, width, channels); a subclassed model has no `input_shape`
    of its own to read."""
    try:
        graph = inference_function(model, (1, *input_shape)).get_concrete_function().graph  # a known batch: the profiler counts by shape
        options = tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
        options["output"] = "none"
        logger = logging.getLogger("tensorflow")
        level = logger.level
        logger.setLevel(logging.ERROR)  # the v1 profiler announces itself as deprecated on every call
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                profile = tf.compat.v1.profiler.profile(graph=graph, cmd="op", options=options)
        finally:
            logger.setLevel(level)
        return int(profile.total_float_ops) or None
    except Exception:  # the profiler does not know every op; a missing figure is not an error
        return None
