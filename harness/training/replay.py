"""`harness export-batches`: what a run's members saw and started from, written out, so that a
plain training loop (docs/reproduce.md) can reproduce a member without reading harness's code.

Written to OUT (default RUN/replay/):
  batches.npz     images, masks: [steps, batch, H, W, C], the train batches of steps 1..N in order
                  (with repeats, `images@R` and `masks@R` for repeat R's stream)
  initial/<member>/<key>.keras   each member's models with their initial weights (before step 1)
  members.json    per member: its loss, its optimizer's Keras config, its seed, which arrays it
                  was fed, and the process settings its run used (deterministic mode, global batch)
The batches come from the same pipeline function the run used (a pure function of the step), so
they are exactly the run's, resumed or not.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import numpy as np

from harness import rundir as rd
from harness.config.naming import repeat_of
from harness.errors import ConfigError
from harness.training.preflight import refuse_data_elsewhere


def export_batches(run_dir: Path, steps: int, out: Path | None = None) -> Path:
    run = rd.RunDir(Path(run_dir))
    run.read_info()  # a folder that is not a run says so, before its missing config.yaml is met
    config = run.read_config()
    refuse_data_elsewhere(run, config)
    if not 1 <= steps <= config.total_steps:
        raise ConfigError(f"export-batches --steps: the run has {config.total_steps} steps; choose 1 to {config.total_steps}, got {steps}")
    target = Path(out or run.path / "replay")
    made = not target.exists()
    out = rd.make_folder(target, "export-batches --out")  # before TensorFlow starts: a bad --out is said at once
    try:
        _export(run, config, steps, out)
    except BaseException:
        if made:  # a refusal (data changed since the run) leaves no empty folder of ours behind
            with contextlib.suppress(OSError):
                out.rmdir()
        raise
    return out


def _export(run: rd.RunDir, config, steps: int, out: Path) -> None:
    from harness.data.pipeline import build_datasets
    from harness.members.base import member_seed
    from harness.members.registry import build_members
    from harness.training.entry import prepare_process, resolve_data_sizes
    from harness.training.export import export_model

    prepare_process(config.model_copy(update={"placement": config.placement.model_copy(update={"strategy": "one_device", "device": "/cpu:0", "logical_cpus": None})}))
    rescanned, scan = resolve_data_sizes(config, run.results_dir, say=False)  # the run said what its scan found
    _refuse_changed_since(run, config, rescanned, scan)
    config = rescanned
    arrays = _batches(build_datasets(config.data, config.training_seeds(), 0, steps, scan).train, steps)
    np.savez(out / "batches.npz", **arrays)
    facts = {}
    for member in build_members(config):
        for key, model in member.exported_models().items():
            export_model(model, out / "initial" / member.name / f"{key}.keras")
        stream = repeat_of(member.name)
        facts[member.name] = {
            "loss": member.spec.loss, "kind": member.spec.kind,
            "optimizer": {"class_name": type(member.optimizer).__name__, "config": _plain(member.optimizer.get_config())},
            "seed": member_seed(config.training_seeds()[stream - 1], member.name),
            "images": _key("images", stream), "masks": _key("masks", stream),
            "global_batch": config.data.batch_size, "deterministic": config.train.deterministic, "steps": steps,
        }
    (out / "members.json").write_text(json.dumps(facts, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _refuse_changed_since(run: rd.RunDir, config, rescanned, scan) -> None:
    """Batches read from files changed since the run would not be the ones its members saw, and a
    hand loop over them would not give the run's losses: refused (exit 3), naming what changed, as
    `resume` checks them. A run a resume went on with on changed data is checked against what it
    accepted, and warned about: its steps before that resume read files that are gone."""
    from harness.training.entry import changed_data_files, changed_files_error, recorded_fingerprint, refuse_changed_data

    refuse_changed_data(config, rescanned, so="the batches exported would not be the ones the run's members saw")
    recorded = recorded_fingerprint(run)
    if found := changed_data_files(recorded, scan):
        raise changed_files_error(found, "the batches exported would not be the ones the run's members saw. Put them back as they "
                                         "were, or start a new run")
    if when := (recorded or {}).get("accepted_change_at"):
        print(f"harness: warning: this run resumed on changed data (accepted {when}): its steps before that resume read the files "
              "as they were then, and these batches are read from the files as they are now, so a hand loop over them will not "
              "give the run's losses", file=sys.stderr)


def _key(name: str, stream: int) -> str:
    return name if stream == 1 else f"{name}@{stream}"


def _batches(train, steps: int) -> dict[str, np.ndarray]:
    streams: dict[str, list] = {}
    for element in train.take(steps):
        for r, (images, masks) in enumerate(element, start=1):
            streams.setdefault(_key("images", r), []).append(images.numpy())
            streams.setdefault(_key("masks", r), []).append(masks.numpy())
    return {key: np.stack(values) for key, values in streams.items()}


def _plain(value):
    """An optimizer config as JSON: numpy scalars as numbers; a schedule's config kept as a dict."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value
