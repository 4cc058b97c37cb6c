"""Repeats vary everything random in training: repeat r of every model has its own initial
weights, data order and augmentation draws (its training seed), and is fed its own input stream,
so that the comparison stays paired within each repeat. The data themselves stay fixed."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import tiny_config

from harness.api import run
from harness.config.loading import validate_config
from harness.config.naming import member_name, members_said, model_of, repeat_of, repeats_span, training_seed
from harness.core.placement import describe_plan
from harness.rundir import read_csv


def rows(result, member: str) -> list[float]:
    frame = result.losses.query("model == @member and split == 'train' and metric == 'loss'")
    return frame.sort_values("step")["value"].tolist()


def val_rows(result, member: str) -> list[float]:
    frame = result.losses.query("model == @member and split == 'val'")
    return frame.sort_values(["step", "metric"])["value"].tolist()


AUGMENTED = {"augment": {"flip_left_right": True, "brightness": 0.05}}


@pytest.fixture(scope="module")
def repeats_run(tmp_path_factory):
    """Two models, three repeats, augmentation on: six members, three input streams; a margin of
    equivalence (on val_iou, which lies in [0, 1]) that any two of them are within."""
    raw = tiny_config(train={"epochs": 2, "repeats": 3}, data=AUGMENTED, output={"equivalence_margin": 1.0})
    raw["models"] = raw["models"][:2]
    return run(validate_config(raw), results_dir=tmp_path_factory.mktemp("repeats"))


def test_names_and_seeds_of_repeats():
    assert member_name("unet", 2, 3) == "unet@2" and member_name("unet", 1, 1) == "unet"
    assert model_of("unet@2") == "unet" and repeat_of("unet@2") == 2 and repeat_of("unet") == 1
    assert [training_seed(7, r) for r in (1, 2, 3)] == [7, 8, 9]
    config = validate_config(tiny_config(train={"repeats": 3}))
    assert config.training_seeds() == (3, 4, 5)



def test_a_models_seeds_are_named_as_one_span_and_placed_on_one_line():
    assert repeats_span(["unet"]) == "unet" and repeats_span([f"unet@{r}" for r in range(1, 21)]) == "unet@1-20"
    assert repeats_span(["unet@1", "unet@3", "unet@4", "unet@6"]) == "unet@1,3-4,6"
    assert members_said(["unet@1", "unet@2", "unet@3", "fcn@2", "unet@5"]) == "unet@1-3,5, fcn@2" and members_said(["a", "b"]) == "a, b"
    plan = {"strategy": "per_model", "replicas": 1, "global_batch": 8, "per_replica_batch": 8, "precision": "float32",
            "models": {"a@1": ["/gpu:0"], "a@2": ["/gpu:1"], "a@3": ["/gpu:0"], "b@1": ["/gpu:1"], "b@2": ["/gpu:1"]}}
    assert describe_plan(plan)[1:] == ["  a@1,3: /gpu:0", "  a@2: /gpu:1", "  b@1-2: /gpu:1"]

@pytest.mark.slow
@pytest.mark.parametrize("repeat", [1, 3])
def test_a_repeat_equals_the_model_trained_alone_with_that_repeats_seed_bitwise(repeats_run, tmp_path, repeat):
    raw = tiny_config(train={"epochs": 2}, data=AUGMENTED, seed=training_seed(3, repeat))
    raw["models"] = [raw["models"][1]]  # unet alone, one repeat
    alone = run(validate_config(raw), results_dir=tmp_path)
    member = f"unet@{repeat}"
    assert rows(repeats_run, member) == rows(alone, "unet")  # every step, exactly
    assert val_rows(repeats_run, member) == val_rows(alone, "unet")
    for a, b in zip(repeats_run.models[member].get_weights(), alone.models["unet"].get_weights()):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow
def test_pairs_over_repeats_test_equivalence_within_the_configured_margin(repeats_run):
    pairs = read_csv(repeats_run.run_dir / "pairs.csv")
    ranked = pairs[pairs["metric"] == "val_iou"].iloc[0]
    assert ranked["equivalence_margin"] == 1.0 and ranked["p_equivalent"] < 0.05 and ranked["equivalent"]
    report = (repeats_run.run_dir / "report.html").read_text(encoding="utf-8")
    assert "Equivalent within ±1 in val_iou (output.equivalence_margin)" in report
    assert "p_equivalent = two one-sided tests that the difference is inside the margin" in report  # the pairs table's key


@pytest.mark.slow
def test_repeats_differ_in_data_order_and_weights_but_pair_within_a_repeat(repeats_run):
    losses = {m: rows(repeats_run, m) for m in repeats_run.models}
    # Different repeats of one model: different starts and batches, so different losses from step 1.
    assert losses["unet@1"][0] != losses["unet@2"][0] != losses["unet@3"][0]
    # The first step's loss of a model depends on its weights and its batch only: with the weights
    # of repeat 1 and the batch of repeat 2 it would differ from both; here each repeat of fcn and
    # unet sees its own stream, so their pairing is by repeat (checked bitwise above for unet).
    assert len({round(v, 12) for v in (losses["fcn@1"][0], losses["fcn@2"][0], losses["fcn@3"][0])}) == 3


def test_the_training_seed_does_not_change_the_data(tmp_path):
    from harness.data.pipeline import build_datasets

    def first_val_image(raw):
        config = validate_config(raw)
        images, masks = next(iter(build_datasets(config.data, config.training_seeds(), 0, 1).val))
        return images.numpy()

    same = first_val_image(tiny_config(seed=3)), first_val_image(tiny_config(seed=11))
    np.testing.assert_array_equal(*same)
    other = first_val_image(tiny_config(data={"seed": 1}))
    assert not np.array_equal(same[0], other)
