"""Grids: one member per combination, readable stable names, errors naming the grid key and value."""

from __future__ import annotations

import copy

import pandas as pd
import pytest
from conftest import tiny_config

from harness.config.grid import format_number, member_label
from harness.config.loading import apply_override, validate_config
from harness.errors import ConfigError
from harness.outputs.tables import with_settings

GRID_ENTRY = {"name": "unet", "arch": "tiny_unet", "grid": {"options.width": [4, 8], "optimizer.learning_rate": ["1e-3", 3e-4]}}


def grid_config(**train):
    return tiny_config(models=[copy.deepcopy(GRID_ENTRY), {"name": "fcn", "arch": "tiny_fcn"}], train={"optimizer": {"name": "sgd", "learning_rate": 0.1, "momentum": 0.9}, **train})


def test_a_grid_expands_in_order_with_readable_names():
    config = validate_config(grid_config())
    assert [m.name for m in config.models] == ["unet-width4-lr1e-3", "unet-width4-lr3e-4", "unet-width8-lr1e-3", "unet-width8-lr3e-4", "fcn"]
    first = config.models[0]
    assert first.options == {"width": 4} and first.optimizer.learning_rate == 0.001
    # the train-level optimizer's other settings are kept, only the learning rate varies
    assert first.optimizer.name == "sgd" and first.optimizer.momentum == 0.9
    assert first.grid_values == {"options.width": 4, "optimizer.learning_rate": 0.001}
    assert config.models[-1].grid_values == {}


def test_the_resolved_config_round_trips_without_the_grid():
    config = validate_config(grid_config())
    again = validate_config(config.to_dict())  # what config.yaml holds: members, no grid
    assert again == config and "grid:" not in config.to_yaml().replace("grid_values", "")


def test_repeats_multiply_grid_members():
    config = validate_config(grid_config(repeats=2))
    assert len(config.member_specs()) == 2 * 5 and config.member_specs()[1].name == "unet-width4-lr1e-3@2"


def test_a_bad_grid_value_names_the_grid_key_and_value():
    raw = grid_config()
    raw["models"][0]["grid"]["options.width"] = [4, "wide"]
    raw["models"][0]["grid"]["optimizer.learning_rate"] = [-1.0]
    with pytest.raises(ConfigError) as info:
        validate_config(raw)
    text = "\n".join(info.value.problems)
    assert "models.0(unet).grid (options.width=4, optimizer.learning_rate=-1.0 -> member unet-width4-lr-1).optimizer.learning_rate" in text
    assert "options.width='wide'" in text


def test_a_grid_key_that_is_no_key_of_a_model_entry_is_said_once_with_where_it_belongs():
    """`grid: {learning_rate: [...]}` was said once per member, each line naming the member and
    suggesting the member's own path: "models.0(a).grid (learning_rate=0.1 -> member a-lr0.1)
    .learning_rate: unknown key; did you mean models.0(a).grid (learning_rate=0.1 -> ...)..."."""
    raw = tiny_config(models=[{"name": "a", "arch": "tiny_fcn", "grid": {"learning_rate": [0.1, 0.2, 0.3], "optimizer.lr": [1, 2]}}])
    with pytest.raises(ConfigError) as info:
        validate_config(raw)
    assert sorted(info.value.problems) == [
        "models.0(a).grid.learning_rate: unknown key of a model entry; did you mean optimizer.learning_rate? (learning_rate is a key of optimizer)",
        "models.0(a).grid.optimizer.lr: unknown key of a model entry; did you mean optimizer.learning_rate?",
    ]
    assert info.value.headline.endswith("2 problem(s) in the config:")


@pytest.mark.parametrize(
    "grid, expected",
    [
        ([], "a mapping of keys to lists"),
        ({"backbone": []}, "models.0(unet).grid.backbone: a non-empty list"),
        ({"name": ["a"]}, "cannot vary"),
        ({"options.width": [1e-3, 0.001]}, "makes the name 'unet-width1e-3' more than once"),
        ({"loss.x": [1]}, "loss is 'bce+dice', not a mapping"),
    ],
)
def test_a_malformed_grid_is_refused_with_its_path(grid, expected):
    raw = tiny_config(models=[{"name": "unet", "arch": "tiny_unet", "loss": "bce+dice", "grid": grid}])
    with pytest.raises(ConfigError) as info:
        validate_config(raw)
    assert expected in "\n".join(info.value.problems)


def test_an_override_can_change_a_grid():
    raw = grid_config()
    apply_override(raw, "models.unet.grid.options.width=[2, 4, 8]")
    assert len(validate_config(raw).models) == 3 * 2 + 1


def test_labels_are_short_and_safe():
    assert [format_number(v) for v in (3e-4, 1e-3, 0.01, 0.5, 2.5e5, 100.0)] == ["3e-4", "1e-3", "0.01", "0.5", "2.5e5", "100"]
    assert member_label("backbone", "resnet34", []) == "resnet34"
    assert member_label("train.flag", True, []) == "flag" and member_label("x.flag", False, []) == "no-flag"
    assert member_label("options.kernel", [3, 3], [[1, 1], [3, 3]]) == "kernel2"
    assert member_label("arch", "pkg.mod:fn", []) == "pkg.mod_fn"


def test_summary_has_one_column_per_grid_key_to_pivot_on():
    config = validate_config(grid_config())
    table = pd.DataFrame({"model": [m.name for m in config.models], "val_iou": [0.1, 0.2, 0.3, 0.4, 0.5]})
    summary = with_settings(table, config.models)
    pivot = summary.dropna(subset=["options.width"]).pivot(index="options.width", columns="optimizer.learning_rate", values="val_iou")
    assert pivot.loc[8, 0.0003] == 0.4 and pivot.loc[4, 0.001] == 0.1
