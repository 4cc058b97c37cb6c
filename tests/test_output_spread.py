"""Whether each network's output depends on its input: output_spread measured at the end of a run,
and a stuck network named in the run's warnings and its verdict."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from conftest import tiny_config

from harness.api import run
from harness.config.loading import validate_config
from harness.core.backend import import_tf
from harness.outputs.compare import best_index, compare_runs, comparison_note
from harness.outputs.stuck import STUCK_BELOW, collapsed_late_warnings, stuck_models_text, stuck_output_warnings
from harness.outputs.tables import build_summary
from harness.outputs.verdict_text import verdict
from harness.training.output_spread import first_images, member_output_spread, output_spread

tf = import_tf()
RNG = np.random.default_rng(0)
IMAGES = RNG.random((6, 4, 4, 3)).astype(np.float32)
MASKS = (RNG.random((6, 4, 4, 1)) > 0.5).astype(np.float32)


def test_the_spread_is_the_outputs_variation_across_images_as_a_share_of_the_targets():
    assert output_spread(MASKS, MASKS) == 1.0
    assert output_spread(np.full_like(MASKS, 0.3), MASKS) == 0.0  # the same output for every image
    assert output_spread(0.5 * MASKS + 0.2, MASKS) == 0.5  # a shift does not vary across images
    # Variation within one image is not variation across images: each image the same checkerboard.
    board = np.broadcast_to(np.indices((4, 4)).sum(axis=0)[..., None] % 2, MASKS.shape).astype(np.float32)
    assert output_spread(board, MASKS) == 0.0


def test_no_spread_where_it_says_nothing():
    assert output_spread(MASKS[:1], MASKS[:1]) is None  # one image
    assert output_spread(MASKS, np.zeros_like(MASKS)) is None  # targets all alike
    assert output_spread(np.full_like(MASKS, np.nan), MASKS) is None  # a diverged network


def test_the_first_images_are_taken_across_batches():
    dataset = tf.data.Dataset.from_tensor_slices((IMAGES, MASKS)).batch(4)
    images, masks = first_images(dataset, 5)
    assert np.array_equal(images, IMAGES[:5]) and np.array_equal(masks, MASKS[:5])
    assert len(first_images(dataset, 50)[0]) == 6


def test_a_member_is_measured_against_its_own_targets():
    def member(task, predict):
        return SimpleNamespace(task=task, predict=predict, device=None)

    assert member_output_spread(member("reconstruction", lambda x: x), IMAGES, MASKS) == 1.0  # an autoencoder's targets: its images
    assert member_output_spread(member("segmentation", lambda x: x), IMAGES, MASKS) != 1.0
    ignored = np.where(MASKS > 0, MASKS, -1.0)  # data.ignore_label's pixels: no class, negative
    assert member_output_spread(member("segmentation", lambda x: np.maximum(ignored, 0)), IMAGES, ignored) == 1.0
    assert member_output_spread(member("segmentation", lambda x: x), IMAGES[:1], MASKS[:1]) is None
    assert member_output_spread(member("segmentation", lambda x: {"mask": x, "edges": x[..., :1]}), IMAGES, MASKS) is None  # a kind's own output
    assert member_output_spread(member("segmentation", lambda x: x[:1]), IMAGES, MASKS) is None  # not one output per image


def test_a_stuck_seed_is_named_with_its_figure_and_a_healthy_model_is_not():
    warnings = stuck_output_warnings({"unet@1": 0.41, "unet@2": 3.2e-7, "unet@3": None, "fcn@1": 0.5, "fcn@2": 0.35})
    assert len(warnings) == 1
    assert warnings[0].startswith("unet, in 1 of 2 seeds (unet@2), gives nearly the same output for every validation image (output_spread 3.2e-07, under 0.01)")
    assert stuck_output_warnings({"ae": 0.0})[0].startswith("ae gives nearly the same output")
    assert stuck_output_warnings({"ae": STUCK_BELOW, "b": None}) == []


def test_a_network_stuck_only_after_its_chosen_weights_is_named_once():
    # (scored weights' spread, the last weights' or None where they are the scored ones, the chosen step)
    warnings = collapsed_late_warnings({"late@2": (0.076, 0.0, 8), "both": (0.0, 0.0, 8), "same": (0.5, None, 8),
                                        "unmeasured": (None, 0.0, 8), "weak": (0.3, 0.02, 5)})
    assert len(warnings) == 1  # `both` is stuck in what was ranked: the stuck warning names it, not this one
    assert warnings[0].startswith("late@2's final weights give nearly the same output for every validation image (output_spread 0, under 0.01)")
    assert "chosen on validation at step 8, measured 0.076: it collapsed after step 8" in warnings[0]


def test_summary_names_each_models_stuck_seeds_and_the_verdict_says_them():
    members = pd.DataFrame({"model": ["deep@1", "deep@2", "deep@3", "small@1", "small@2", "small@3"], "status": ["ok"] * 6,
                            "val_loss": [0.012, 0.009, 0.012, 0.005, 0.004, 0.005], "output_spread": [3.2e-7, 0.31, 0.0, 0.6, 0.5, 0.55]})
    summary = build_summary(members, rank_by="val_loss").set_index("model")
    # The seeds' mean (0.10) is over the threshold: only the column of stuck seeds tells.
    assert summary.loc["deep", "output_spread"] > STUCK_BELOW
    assert summary.loc["deep", "stuck_seeds"] == "deep@1 3.2e-07, deep@3 0 (2 of 3)" and pd.isna(summary.loc["small", "stuck_seeds"])
    said = stuck_models_text(summary.reset_index())
    assert said.startswith("Stuck, the output nearly the same for every image (output_spread under 0.01): deep@1 3.2e-07, deep@3 0 (2 of 3);")
    assert stuck_models_text(summary.reset_index().assign(stuck_seeds=None)) == ""
    assert stuck_models_text(summary.reset_index().drop(columns="stuck_seeds")) == ""  # a run from before the measure
    assert "stuck_seeds" not in build_summary(members.drop(columns="output_spread"), rank_by="val_loss")
    pairs = pd.DataFrame({"model_a": ["small"], "model_b": ["deep"], "diff": [-0.004], "diff_low": [-0.005], "diff_high": [-0.003],
                          "supported": [False], "beyond_image_noise": [True], "covers": ["validation images"]})
    assert verdict(pairs, "val_loss", summary.reset_index()).endswith(said)


def test_a_run_measures_every_member_and_names_the_stuck_one(tmp_path):
    raw = tiny_config(models=[{"name": "fcn", "arch": "tiny_fcn", "optimizer": {"name": "adam", "learning_rate": 0.01}},
                              {"name": "stuck", "kind": "custom_kinds:ConstantOutput", "arch": "tiny_fcn"}],
                      train={"epochs": 3})
    result = run(validate_config(raw), results_dir=tmp_path)
    summary = result.summary.set_index("model")
    assert summary.loc["stuck", "output_spread"] == 0.0 and summary.loc["fcn", "output_spread"] > STUCK_BELOW
    stuck = [w for w in result.info["warnings"] if "nearly the same output" in w]
    assert len(stuck) == 1 and stuck[0].startswith("stuck gives nearly the same output")
    assert result.info["models"]["stuck"]["output_spread"] == 0.0
    assert result.summary.set_index("model").loc["stuck", "stuck_seeds"] == "stuck 0"
    assert "Stuck, the output nearly the same for every image (output_spread under 0.01): stuck 0;" in (result.run_dir / "report.html").read_text()
    # `harness compare` names it under the run it is in, and calls no spread the best (0.8 is not better than 0.4).
    table = compare_runs([result.run_dir])
    assert table.set_index("model").loc["stuck", "stuck_seeds"] == "stuck 0" and best_index(table, "output_spread") is None
    assert f"(output_spread under 0.01): {table['run'].iloc[0]}: stuck 0; a stuck network" in comparison_note(table)
    assert "Stuck" not in comparison_note(table[table["model"] == "fcn"])


@pytest.mark.slow  # a tiny run with a test split, 7 s: the fast tier is near its 3-minute line
def test_with_a_test_split_the_spread_is_of_the_weights_it_scored_and_a_late_collapse_is_named(tmp_path):
    # `late` learns for 8 steps, then every weight goes to zero: its last weights give one output
    # for every image, its chosen ones (best on validation, scored on test) do not. It is not
    # called stuck; a warning says it collapsed after its chosen step and which file to serve.
    raw = tiny_config(models=[{"name": "fcn", "arch": "tiny_fcn", "optimizer": {"name": "adam", "learning_rate": 0.01}},
                              {"name": "late", "kind": "custom_kinds:CollapsesLate", "arch": "tiny_fcn",
                               "optimizer": {"name": "sgd", "learning_rate": 0.1}}],
                      train={"epochs": 3}, data={"test_size": 8})
    result = run(validate_config(raw), results_dir=tmp_path)
    chosen = result.info["test"]["members"]["late"]
    assert chosen["weights"] == "best" and chosen["step"] <= 8 < result.info["steps_done"]
    images, masks = RNG.random((6, 16, 16, 3)).astype(np.float32), MASKS.repeat(4, axis=1).repeat(4, axis=2)  # any: its last weights ignore them
    assert output_spread(result.models["late"](images, training=False).numpy(), masks) == 0.0
    assert result.info["models"]["late"]["output_spread"] > STUCK_BELOW
    assert pd.isna(result.summary.set_index("model").loc["late", "stuck_seeds"])
    assert result.info["models"]["late"]["last_output_spread"] == 0.0
    named = [w for w in result.info["warnings"] if "nearly the same output" in w]
    assert len(named) == 1 and named[0].startswith("late's final weights") and f"collapsed after step {chosen['step']}" in named[0]
    assert "serve models/late/best.keras" in named[0]
