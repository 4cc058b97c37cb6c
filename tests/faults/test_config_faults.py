"""Config errors found before anything is built or written: settings that do not go together, and
durations that do not fit the run (for real data, once the scan knows its size). Each is exit 2
with the reason, and no run directory is left."""

from __future__ import annotations

import pytest
from conftest import run_dirs, run_main, tiny_config, write_yaml
from pictures import write_folder

from harness.config.loading import validate_config
from harness.errors import ConfigError

SCHEDULE = {"name": "adam", "learning_rate": 0.01, "schedule": {"name": "cosine", "warmup_epochs": 3}}


@pytest.mark.parametrize("changes, reason", [
    ({"train": {"epochs": 2, "race": {"rungs": [5]}}}, "at or after the end of the run"),
    ({"train": {"epochs": 4, "race": {"rungs": [1]}, "early_stopping": {"metric": "val_iou"}}}, "train.race with train.early_stopping"),
    ({"models": [{"name": "a", "arch": "tiny_fcn"}], "train": {"epochs": 4, "race": {"rungs": [1]}}}, "train.race with one model"),
    ({"train": {"epochs": 4, "race": {"rungs": [1], "metric": "val_loss"}}}, "their val_loss values are not comparable"),  # deconv: focal+dice
    ({"models": [{"name": "a", "arch": "tiny_fcn"}, {"name": "ae", "kind": "autoencoder", "arch": "small_autoencoder"}],
      "train": {"epochs": 4, "race": {"rungs": [1], "metric": "val_loss"}}}, "their val_loss values are not comparable"),
    ({"train": {"epochs": 2, "optimizer": SCHEDULE}}, "a warm-up of 12 steps is as long as the run (8 steps)"),
    ({"placement": {"grouping": "single", "max_members_per_group": 2}}, "placement.grouping: single"),
])
def test_settings_that_do_not_go_together_are_refused_as_the_config_is_read(changes, reason):
    with pytest.raises(ConfigError) as refused:
        validate_config(tiny_config(**changes))
    assert reason in refused.value.render()


def test_a_race_rung_beyond_a_real_datasets_run_is_refused_before_any_run_directory(tmp_path):
    images, masks = write_folder(tmp_path, 12, size=(16, 16))
    data = {"source": "folder", "images": str(images), "masks": str(masks), "image_size": [16, 16], "batch_size": 4,
            "train_size": None, "val_size": None, "val_fraction": 0.25}
    raw = tiny_config(data=data, train={"epochs": 2, "race": {"rungs": [5]}})
    validate_config(raw)  # the size of the data is not known yet: the scan finds it
    done = run_main("run", write_yaml(tmp_path / "c.yaml", raw), "--results", tmp_path / "r")
    assert done.returncode == 2, done.stderr
    assert "does not fit the data found" in done.stderr and "train.race.rungs: epoch(s) [5]" in done.stderr
    assert run_dirs(tmp_path / "r") == [] and "building" not in done.stderr
