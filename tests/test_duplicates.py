"""Images copied into two splits: found in the scan held in memory and in the on-disk store, named
in run.json's data facts, and said before training."""

from __future__ import annotations

import csv
import json
import shutil

from pictures import data_config, scan, write_folder

from harness.data.duplicates import across_splits, duplicates_warning
from harness.training.preflight import resolve_data_sizes


def manifest_with_copies(root):
    """Eight pictures, ex00-ex05 train, ex06 val, ex07 test; then a validation row whose image is
    a copy of ex01's file and a test row whose image is a copy of ex06's (a validation image)."""
    images, masks = write_folder(root, 8)
    shutil.copy(images / "ex01.png", images / "copy_of_ex01.png")
    shutil.copy(images / "ex06.png", images / "copy_of_ex06.png")
    manifest = root / "pairs.csv"
    rows = [(f"images/ex{i:02d}.png", f"masks/ex{i:02d}.png", "train" if i < 6 else ("val" if i == 6 else "test")) for i in range(8)]
    rows += [("images/copy_of_ex01.png", "masks/ex03.png", "val"), ("images/copy_of_ex06.png", "masks/ex06.png", "test")]
    with manifest.open("w", newline="") as handle:
        csv.writer(handle).writerows([("image", "mask", "split"), *rows])
    return data_config({"source": "csv", "manifest": str(manifest)})


def test_copies_across_splits_are_counted_and_named_in_memory_and_in_the_store(tmp_path):
    config = manifest_with_copies(tmp_path / "d")
    held = scan(config).facts["duplicates"]
    assert (held["val_in_train"], held["test_in_train"], held["test_in_val"]) == (1, 0, 1)
    assert any("copy_of_ex01.png" in e and e.startswith("val ") and "= train " in e and "ex01.png" in e for e in held["examples"])
    assert any("copy_of_ex06.png" in e and e.startswith("test ") and "= val " in e for e in held["examples"])
    disk = config.model_copy(update={"data": config.data.model_copy(update={"cache": "disk"})})
    assert scan(disk, tmp_path / "cache").facts["duplicates"] == held
    # A store written before digests were kept: each such shard is decoded again, once.
    for shard in (tmp_path / "cache").glob("shard-*.json"):
        info = json.loads(shard.read_text())
        shard.write_text(json.dumps({k: v for k, v in info.items() if k != "image_digests"}))
    again = scan(disk, tmp_path / "cache").facts
    assert again["cache"]["decoded"] == 10 and again["duplicates"] == held
    assert scan(disk, tmp_path / "cache").facts["cache"]["decoded"] == 0


def test_a_clean_split_has_no_copies_and_says_nothing(tmp_path):
    images, masks = write_folder(tmp_path, 10)
    facts = scan(data_config({"source": "folder", "images": str(images), "masks": str(masks), "val_fraction": 0.3})).facts["duplicates"]
    assert facts == {"val_in_train": 0, "test_in_train": 0, "test_in_val": 0, "examples": []}
    assert duplicates_warning(facts, data_config({"source": "synthetic", "val_size": 3}).data) is None


def test_the_warning_counts_each_kind_and_is_printed_before_training(tmp_path, capsys):
    facts = across_splits({"train": [("a", "1"), ("b", "2")], "val": [("c", "1"), ("d", "3")], "test": [("e", "2"), ("f", "3"), ("g", "4")]})
    assert (facts["val_in_train"], facts["test_in_train"], facts["test_in_val"]) == (1, 1, 1)
    text = duplicates_warning(facts, data_config({"source": "synthetic", "val_size": 2, "test_size": 3}).data)
    assert "2 of 3 test images are copies of training (1) or validation (1) images" in text
    assert "1 of 2 validation images" in text and "e.g. val c = train a" in text
    resolve_data_sizes(manifest_with_copies(tmp_path / "d"), tmp_path / "results", 1)
    said = capsys.readouterr().err
    assert "harness: warning: 1 of 2 test images are copies of validation images; 1 of 2 validation images are copies of training" in said
    resolve_data_sizes(manifest_with_copies(tmp_path / "e"), tmp_path / "results", 1, say=False)  # a group's worker: its driver said it
    assert "copies" not in capsys.readouterr().err
