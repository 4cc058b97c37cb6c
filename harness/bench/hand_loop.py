"""The seed-003 script as a process of its own, for `harness bench --section fixed`: the same
models, the same batches and the same number of steps as `harness run CONFIG`, and a validation
pass over the validation set at the same steps (each model's loss and IoU counts), written the
way one-off comparison scripts are: one tf.function with a GradientTape per model, a batch fed
from Python, every loss read back each step. It prints one JSON line: wall-clock marks of its
phases, for the bench to set beside the run's (run.json `phases`).

    python -m harness.bench.hand_loop CONFIG [--set KEY=VALUE ...]
"""

from __future__ import annotations

import json
import sys
import time


def main(argv: list[str]) -> None:
    marks = {"imported": time.time()}  # harness's package import is the CLI's too; TensorFlow below
    from harness.config.loading import load_config

    path, overrides = argv[0], [a for i, a in enumerate(argv[1:]) if i % 2 == 1]
    config = load_config(path, overrides)
    from harness.bench.contenders import _members, seed003_step
    from harness.core.backend import import_tf
    from harness.core.evaluation import segmentation_counts
    from harness.core.placement import configure_determinism
    from harness.data.pipeline import build_datasets

    tf = import_tf()
    configure_determinism(config.train.deterministic)  # the same graph settings as the run's
    marks["tensorflow_imported"] = time.time()
    _, members, _ = _members(config)
    datasets = build_datasets(config.data, config.training_seeds()[:1], 0, config.total_steps)
    marks["built"] = time.time()

    @tf.function
    def train(images, masks):
        return [seed003_step(m, images, masks) for m in members]

    @tf.function
    def validate(images, masks):
        out = []
        for m in members:
            probabilities = m.model(images, training=False)
            out.append(segmentation_counts(m.loss_fn(masks, probabilities), probabilities, masks, config.data.classes))
        return out

    validations = []
    for step, ((images, masks),) in enumerate(datasets.train, start=1):
        losses = [float(v) for v in train(images, masks)]  # the script prints them
        if step == 1:
            marks["first_call_done"] = time.time()
        if step % datasets.steps_per_epoch == 0 or step == config.total_steps:
            began = time.time()
            for val_images, val_masks in datasets.val:
                [{k: v.numpy() for k, v in scores.items()} for scores in validate(val_images, val_masks)]
            validations.append(time.time() - began)
        if step % 10 == 0:
            print(f"step {step}: {' '.join(f'{v:.4f}' for v in losses)}", file=sys.stderr, flush=True)
    marks["done"] = time.time()
    print(json.dumps({"marks": marks, "validations_s": validations, "steps": config.total_steps}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
