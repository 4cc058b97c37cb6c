"""The user's own code (model factories, member kinds) failing: exit 2, named as theirs, with their
traceback lines, before a run directory exists; a model whose output does not fit the masks is
refused with both shapes before any trace."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import only_run_dir, run_main, tiny_config, write_yaml


def _run(tmp_path, models, **changes):
    results = tmp_path / "r"
    return run_main("run", write_yaml(tmp_path / "c.yaml", tiny_config(models=models, **changes)), "--results", results), results


def test_a_factory_that_raises_is_the_users_error_with_their_traceback_and_no_run_folder(tmp_path):
    result, results = _run(tmp_path, [{"name": "fcn", "arch": "tiny_fcn"}, {"name": "mine", "arch": "factories:raises_on_build"}])
    assert result.returncode == 2, result.stderr
    assert "your model code failed" in result.stderr and "bug in harness" not in result.stderr
    assert "models.1(mine): factories:raises_on_build raised KeyError: 'wide'" in result.stderr
    assert "factories.py" in result.stderr and 'widths["wide"]' in result.stderr  # the user's own line
    assert "harness/members" not in result.stderr  # none of harness's frames
    assert not results.exists() or not any(results.rglob("run.json"))


def test_a_kind_that_raises_while_building_is_named(tmp_path):
    result, results = _run(tmp_path, [{"name": "odd", "kind": "custom_kinds:BrokenBuild", "arch": "tiny_fcn"}])
    assert result.returncode == 2, result.stderr
    assert "models.0(odd): kind custom_kinds:BrokenBuild raised RuntimeError: no pretrained weights for tiny_fcn" in result.stderr
    assert "custom_kinds.py" in result.stderr
    assert not any(results.rglob("run.json")) if results.exists() else True


def test_a_model_whose_output_is_half_the_mask_is_refused_with_both_shapes_before_tracing(tmp_path):
    result, results = _run(tmp_path, [{"name": "half", "arch": "factories:half_size"}, {"name": "fcn", "arch": "tiny_fcn"}])
    assert result.returncode == 2, result.stderr
    assert "models.0(half): factories:half_size returns a model whose output has shape (None, 8, 8, 1), but the masks have shape (None, 16, 16, 1)" in result.stderr
    assert "compiling" not in result.stderr and not (results.exists() and any(results.rglob("run.json")))


def test_a_model_that_returns_logits_or_unnormalised_classes_is_refused_before_tracing(tmp_path):
    """Logits where probabilities are due were clipped by the losses: the model trained on flat
    gradients, scored 0 and nothing said why."""
    result, results = _run(tmp_path, [{"name": "raw", "arch": "factories:logits"}, {"name": "fcn", "arch": "tiny_fcn"}])
    assert result.returncode == 2, result.stderr
    assert "models.0(raw): factories:logits returns values from -" in result.stderr and "probabilities in [0, 1]" in result.stderr
    assert "the activation the factory is given ('sigmoid' here)" in result.stderr and "fcn" not in result.stderr.split("failed")[-1]
    three = tiny_config(models=[{"name": "sig", "arch": "factories:logits", "options": {"softmax_classes": 3}}])
    three["data"]["classes"] = 3
    result = run_main("run", write_yaml(tmp_path / "k.yaml", three), "--results", results)
    assert result.returncode == 2 and "do not sum to 1 per pixel" in result.stderr and "('softmax')" in result.stderr
    assert "compiling" not in result.stderr and not (results.exists() and any(results.rglob("run.json")))


def test_a_model_whose_input_is_not_the_images_is_refused_before_tracing(tmp_path):
    """It stopped the first trace with Keras's "incompatible with the layer", reported as a bug in harness (exit 1)."""
    result, results = _run(tmp_path, [{"name": "grey", "arch": "factories:one_channel"}])
    assert result.returncode == 2, result.stderr
    assert "models.0(grey): factories:one_channel returns a model that takes images of shape (None, 16, 16, 1), but the images have shape (None, 16, 16, 3)" in result.stderr
    assert "bug in harness" not in result.stderr and not (results.exists() and any(results.rglob("run.json")))


def test_a_subclassed_model_trains_and_is_counted_timed_and_exported(tmp_path):
    """A keras.Model subclass has no variables until called: harness builds it before counting its
    parameters, making its optimizer's slots and tracing the step (a subclassed model used to stop
    the run with "the layer isn't built", and its FLOPs with "no defined input shape")."""
    models = [{"name": "sub", "arch": "factories:subclassed"}, {"name": "fcn", "arch": "tiny_fcn"}]
    result, results = _run(tmp_path, models, output={"serve_probe": True})
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(results)
    row = pd.read_csv(run_dir / "summary.csv").set_index("model").loc["sub"]
    assert row["status"] == "ok" and row["params"] == 3 * 3 * 3 * 4 + 4 + 4 * 4 + 4 + 1
    assert row["flops_per_example"] > 0 and row["latency_ms"] > 0
    assert (run_dir / "models" / "sub" / "model.keras").stat().st_size > 0


def test_a_subclassed_model_whose_output_is_half_the_mask_is_refused_before_tracing(tmp_path):
    result, results = _run(tmp_path, [{"name": "half", "arch": "factories:subclassed", "options": {"stride": 2}}])
    assert result.returncode == 2, result.stderr
    assert "models.0(half): factories:subclassed returns a model whose output has shape (None, 8, 8, 1)" in result.stderr
    assert "compiling" not in result.stderr and not (results.exists() and any(results.rglob("run.json")))


def test_a_kind_whose_step_raises_while_tracing_is_named_and_leaves_no_run_folder(tmp_path):
    result, results = _run(tmp_path, [{"name": "fcn", "arch": "tiny_fcn"}, {"name": "odd", "kind": "custom_kinds:BrokenStep", "arch": "tiny_fcn"}])
    assert result.returncode == 2, result.stderr
    assert "your model code failed while the first step was traced" in result.stderr and "bug in harness" not in result.stderr
    assert "models.1(odd): kind custom_kinds:BrokenStep raised AttributeError" in result.stderr
    assert "models.0(fcn)" not in result.stderr  # the built-in member is not blamed
    assert "custom_kinds.py" in result.stderr and "in train_step" in result.stderr
    assert list(results.iterdir()) == []  # neither the run's folder nor its experiment's


def test_a_bug_in_harness_is_still_reported_as_one(tmp_path, monkeypatch, crash_report):
    import functools

    import harness.training.entry as entry

    # A failure with no frame outside harness (a builtin raising, as harness's own code would):
    # a function written in this test file would count as the user's.
    monkeypatch.setattr(entry, "record_data_fingerprint", functools.partial(divmod, 1, 0))
    result, _ = _run(tmp_path, [{"name": "fcn", "arch": "tiny_fcn"}])
    assert result.returncode == 1 and "bug in harness" in result.stderr
    assert "record_data_fingerprint(run, scan)" in crash_report().read_text()  # harness's own line, kept


def test_a_compiled_librarys_frame_is_not_the_users_code(tmp_path, monkeypatch):
    from pathlib import Path

    from harness.errors import user_frames

    mine = tmp_path / "mine.py"
    mine.write_text("def boom():\n    raise ValueError('x')\n")
    monkeypatch.chdir(tmp_path)
    try:
        exec(compile(mine.read_text(), str(mine), "exec"), namespace := {})
        namespace["boom"]()
    except ValueError as exc:
        assert user_frames(exc)[-1][0] == str(mine)  # innermost: the user's file
    # pandas' parser, in Cython, names its frames "pandas/_libs/parsers.pyx": no such file here.
    import pandas as pd

    (tmp_path / "bad.csv").write_bytes(b"\x00\x01\xff\xfe")
    try:
        pd.read_csv(tmp_path / "bad.csv")
    except UnicodeDecodeError as exc:
        frames = {Path(f[0]).resolve() for f in user_frames(exc)}
        assert frames == {Path(__file__).resolve()}, "only this test's own frame, none of pandas'"


def test_an_option_value_a_builtin_network_refuses_is_the_configs_error_before_any_run_folder(tmp_path):
    # segmentation-models and the tiny models check option values only when they build: such a
    # value was "an internal error, a bug in harness" (exit 1) after the run folder was made.
    models = [{"name": "fcn", "arch": "tiny_fcn", "options": {"width": -3}}, {"name": "unet", "arch": "tiny_unet"},
              {"name": "gan", "kind": "gan", "arch": "pix2pix_generator", "options": {"width": 4, "depth": 2},
               "gan": {"discriminator": "patchgan", "discriminator_options": {"width": 0}}}]
    result, results = _run(tmp_path, models)
    assert result.returncode == 2, result.stderr
    assert "a model does not build with the options it is given (nothing was written)" in result.stderr and "bug in harness" not in result.stderr
    assert "models.0(fcn): tiny_fcn with options {'width': -3}: ValueError: " in result.stderr
    assert "models.2(gan): pix2pix_generator with options {'width': 4, 'depth': 2}, gan.discriminator_options {'width': 0}: ValueError: " in result.stderr
    assert "unet" not in result.stderr
    assert not results.exists() or not any(results.rglob("run.json"))
    planned = run_main("plan", tmp_path / "c.yaml", "--results", results)
    assert planned.returncode == 2 and "models.0(fcn): tiny_fcn with options {'width': -3}" in planned.stderr, planned.stderr


@pytest.mark.slow
def test_a_segmentation_models_option_value_it_refuses_is_named(tmp_path):
    models = [{"name": "unet", "arch": "Unet", "backbone": "resnet18", "options": {"decoder_block_type": "bogus"}}]
    result, results = _run(tmp_path, models, data={"image_size": [32, 32], "train_size": 4, "val_size": 4, "batch_size": 2})
    assert result.returncode == 2, result.stderr
    assert "models.0(unet): Unet (resnet18) with options {'decoder_block_type': 'bogus'}: ValueError: Decoder block type should be in" in result.stderr
    assert not results.exists() or not any(results.rglob("run.json"))
