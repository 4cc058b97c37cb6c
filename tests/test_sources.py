"""Real data: every source kind, the pre-flight scan with each kind of fault injected into real
files, augmentation, and the folder source end to end through the CLI."""

from __future__ import annotations

import csv
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli, run_main, tiny_config, write_yaml
from pictures import data_config, picture, scan, write_folder, write_tfds
from PIL import Image

from harness.config.loading import validate_config
from harness.core.backend import import_tf
from harness.data.pipeline import build_datasets
from harness.errors import ConfigError, DataError
from harness.data.resolve import load_scan, resolve_data
from harness.members.registry import input_multiple
from harness.rundir import read_csv

tf = import_tf()


def test_folder_source_reads_every_format_maps_0_255_and_resolves_sizes(tmp_path):
    images, masks = write_folder(tmp_path, 12)
    for i, ext in enumerate((".jpg", ".bmp", ".tif")):  # the same pixels in the other formats
        source = images / f"ex{i:02d}.png"
        Image.open(source).save(source.with_suffix(ext), **({"quality": 100} if ext == ".jpg" else {}))
        source.unlink()
    config = data_config({"source": "folder", "images": str(images), "masks": str(masks), "val_fraction": 0.25})
    resolved, result = resolve_data(config)
    assert result.train_size + result.val_size == 12 and result.val_size >= 1
    assert resolved.data.train_size == result.train_size and resolved.data.image_size == (16, 16)
    assert result.images.shape == (12, 16, 16, 3) and set(np.unique(result.labels)) == {0, 1}
    assert any("0/255" in note for note in result.facts["notes"])
    assert result.facts["scan_items_per_s"] > 0


FAULTS = {
    "truncated": "does not decode",
    "size": "but its mask is",
    "labels": "labels outside 0..1",
    "jpegmask": "lossy JPEG mask",
    "rgbmask": "give data.palette",
    "nomask": "no mask with the stem",
    "noimage": "no image with the stem",
    "dup": "share the stem",
}


def inject_faults(images: Path, masks: Path) -> None:
    good_png = (images / "ex00.png").read_bytes()
    (images / "ex01.png").write_bytes(good_png[: len(good_png) // 3])  # truncated
    Image.fromarray(np.zeros((20, 20), np.uint8)).save(masks / "ex02.png")  # size mismatch
    Image.fromarray(np.full((24, 32), 7, np.uint8)).save(masks / "ex03.png")  # label 7 with classes 1
    (masks / "ex04.png").unlink()
    Image.fromarray((picture(4)[1] * 255)).save(masks / "ex04.jpg", quality=50)  # lossy JPEG mask
    rgb = np.zeros((24, 32, 3), np.uint8)
    rgb[..., 0] = 200
    Image.fromarray(rgb).save(masks / "ex05.png")  # coloured RGB mask, no palette
    (masks / "ex06.png").unlink()  # image without mask
    Image.fromarray(np.zeros((24, 32), np.uint8)).save(masks / "orphan.png")  # mask without image
    Image.open(images / "ex07.png").save(images / "ex07.bmp")  # the same stem twice


def test_every_bad_file_is_named_with_its_reason_and_exit_3(tmp_path):
    images, masks = write_folder(tmp_path, 12)
    inject_faults(images, masks)
    config = tiny_config(data={"source": "folder", "images": str(images), "masks": str(masks), "image_size": [16, 16], "batch_size": 2, "train_size": None, "val_size": None})
    result = run_main("run", write_yaml(tmp_path / "c.yaml", config), "--results", tmp_path / "results")
    assert result.returncode == 3, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("  - ")]
    assert len(lines) == len(FAULTS), result.stderr
    for reason in FAULTS.values():
        assert any(reason in line for line in lines), (reason, result.stderr)
    for name in ("ex01.png", "ex02", "ex03", "ex04.jpg", "ex05", "ex06.png", "orphan.png", "ex07"):
        assert any(name in line for line in lines), name
    assert not (tmp_path / "results" / "tiny").exists() or not list((tmp_path / "results" / "tiny").glob("*/run.json"))


def test_skip_leaves_bad_files_out_and_counts_them(tmp_path):
    images, masks = write_folder(tmp_path, 12)
    inject_faults(images, masks)
    config = data_config({"source": "folder", "images": str(images), "masks": str(masks), "on_bad_data": "skip", "val_fraction": 0.3})
    result = scan(config)
    # 12 stems: ex06 has no mask, ex07 is doubled; of the 10 listed pairs 5 are bad
    assert result.facts["skipped"] == len(FAULTS)
    assert result.facts["used"] == result.train_size + result.val_size == 12 - 2 - 5
    assert len(result.facts["problems"]) == len(FAULTS)


def test_palette_and_rgb_palette_masks_become_classes(tmp_path):
    images, masks = tmp_path / "i", tmp_path / "m"
    images.mkdir()
    masks.mkdir()
    labels = np.zeros((16, 16), np.uint8)
    labels[4:8] = 1
    labels[10:] = 2
    colours = [(0, 0, 0), (255, 0, 0), (0, 128, 255)]
    for i in range(6):
        Image.fromarray(np.full((16, 16, 3), 90, np.uint8)).save(images / f"p{i}.png")
        if i % 2:
            indexed = Image.fromarray(labels, mode="L").convert("P")
            indexed.putpalette([c for rgb in colours for c in rgb] + [0] * (768 - 9))
            indexed.putdata(labels.flatten().tolist())
            indexed.save(masks / f"p{i}.png")
        else:
            Image.fromarray(np.array(colours, np.uint8)[labels]).save(masks / f"p{i}.png")
    config = data_config({"source": "folder", "images": str(images), "masks": str(masks), "classes": 3, "palette": colours, "val_fraction": 0.4})
    result = scan(config)
    assert result.labels.shape[0] == 6
    for mask in result.labels:
        np.testing.assert_array_equal(mask, labels)


def test_csv_manifest_with_splits_and_problems(tmp_path):
    images, masks = write_folder(tmp_path / "d", 8)
    manifest = tmp_path / "d" / "pairs.csv"
    with manifest.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image", "mask", "split"])
        for i in range(8):
            writer.writerow([f"images/ex{i:02d}.png", f"masks/ex{i:02d}.png", "val" if i >= 6 else "train"])
        writer.writerow(["images/missing.png", "masks/ex00.png", "train"])
    config = data_config({"source": "csv", "manifest": str(manifest)})
    with pytest.raises(DataError) as error:
        scan(config)
    assert error.value.problems == [f"{manifest}:10: file does not exist: {tmp_path / 'd' / 'images' / 'missing.png'}"]
    result = scan(data_config({"source": "csv", "manifest": str(manifest), "on_bad_data": "skip"}))
    assert (result.train_size, result.val_size) == (6, 2)


def test_a_fraction_of_a_few_files_that_drew_no_validation_file_says_why(tmp_path):
    """Each file's split is its own hash draw, not a share of the count: a small folder can draw
    none (8 files at 0.25: 0.75^8, one folder in ten), which "0 validation examples" did not explain.
    ex00..ex07's stems hash to 0.091 and up: none at 0.05, two at 0.25."""
    write_folder(tmp_path / "d", 8)
    raw = {"source": "folder", "images": str(tmp_path / "d" / "images"), "masks": str(tmp_path / "d" / "masks")}
    with pytest.raises(DataError) as error:
        scan(data_config({**raw, "val_fraction": 0.05}))
    assert "8 examples at 0.05 expect 0.4 for validation and drew none. Raise data.val_fraction" in error.value.headline
    assert scan(data_config({**raw, "val_fraction": 0.25})).val_size == 2


def test_val_and_test_fractions_take_their_share_of_the_train_rows_when_every_row_is_marked(tmp_path):
    # Cityscapes' manifest marks every row train or val (its test masks are not public): a
    # test_fraction found no row to take from and stopped with "no test examples".
    write_folder(tmp_path / "d", 40)
    manifest = tmp_path / "d" / "pairs.csv"
    with manifest.open("w", newline="") as handle:
        rows = [[f"images/ex{i:02d}.png", f"masks/ex{i:02d}.png", "val" if i >= 32 else "train"] for i in range(40)]
        csv.writer(handle).writerows([["image", "mask", "split"], *rows])
    result = scan(data_config({"source": "csv", "manifest": str(manifest), "test_fraction": 0.25}))
    assert result.val_size == 8 and result.test_size > 0 and result.train_size + result.test_size == 32  # validation's rows stay validation's
    assert any("manifest rows marked train, of which data.test_fraction took its share" in note for note in result.facts["notes"])
    assert scan(data_config({"source": "csv", "manifest": str(manifest)})).test_size == 0  # without test_fraction: as marked
    # official train and test splits, no validation rows: val_fraction found none to take
    # ("0 validation examples ... (data.val_fraction)"); its share now comes from the train rows
    with manifest.open("w", newline="") as handle:
        rows = [[f"images/ex{i:02d}.png", f"masks/ex{i:02d}.png", "test" if i >= 32 else "train"] for i in range(40)]
        csv.writer(handle).writerows([["image", "mask", "split"], *rows])
    result = scan(data_config({"source": "csv", "manifest": str(manifest), "val_fraction": 0.25}))
    assert result.test_size == 8 and result.val_size > 0 and result.train_size + result.val_size == 32
    assert any("manifest rows marked train, of which data.val_fraction took its share" in note for note in result.facts["notes"])
    with manifest.open("w", newline="") as handle:  # every row marked train: both shares come from them
        csv.writer(handle).writerows([["image", "mask", "split"], *[[f"images/ex{i:02d}.png", f"masks/ex{i:02d}.png", "train"] for i in range(40)]])
    result = scan(data_config({"source": "csv", "manifest": str(manifest), "val_fraction": 0.25, "test_fraction": 0.25}))
    assert result.val_size > 0 and result.test_size > 0 and result.train_size + result.val_size + result.test_size == 40
    assert any("(and data.test_fraction its share for the test split)" in note for note in result.facts["notes"])


def test_arrays_npz_and_npy_with_nan_checks(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (10, 16, 16, 3)).astype(np.float32)
    y = (rng.uniform(0, 1, (10, 16, 16)) > 0.5).astype(np.uint8)
    np.savez(tmp_path / "d.npz", images=x[:8], masks=y[:8], val_images=x[8:], val_masks=y[8:])
    result = scan(data_config({"source": "arrays", "arrays": str(tmp_path / "d.npz")}))
    assert (result.train_size, result.val_size) == (8, 2)
    np.testing.assert_allclose(result.images[:8], x[:8])  # float images kept as floats
    x[3, 0, 0, 0] = np.nan
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    with pytest.raises(DataError) as error:
        scan(data_config({"source": "arrays", "images": str(tmp_path / "x.npy"), "masks": str(tmp_path / "y.npy")}))
    assert error.value.problems == ["x.npy[3]: image has 1 NaN/Inf values"]


def test_tfds_dataset_on_disk_is_read_without_download(tmp_path):
    root = write_tfds(tmp_path / "tfds")
    config = data_config({"source": "tfds", "tfds": {"name": "shapes_seg", "data_dir": str(root)}})
    result = scan(config)
    assert (result.train_size, result.val_size) == (6, 2)
    with pytest.raises(ConfigError, match="never downloads"):
        scan(data_config({"source": "tfds", "tfds": {"name": "voc", "data_dir": str(root)}}))
    with pytest.raises(ConfigError, match="splits on disk: test, train"):
        scan(data_config({"source": "tfds", "tfds": {"name": "shapes_seg", "data_dir": str(root), "val_split": "validation"}}))


def test_auto_image_size_suits_every_model_and_disk_cache_is_reused(tmp_path):
    images, masks = write_folder(tmp_path, 8, size=(37, 45))
    raw = {"source": "folder", "images": str(images), "masks": str(masks), "image_size": "auto", "cache": "disk", "val_fraction": 0.3}
    config = data_config(raw, models=[{"name": "u", "arch": "tiny_unet"}])  # sides multiple of 4
    resolved, result = resolve_data(config, input_multiple(config), tmp_path / "cache")
    assert resolved.data.image_size == (36, 44) and "median source size 37x45" in result.facts["image_size_reason"]
    assert result.images is None and result.facts["cache"]["decoded"] == 8 and list((tmp_path / "cache").glob("shard-*.bin"))
    again = load_scan(config.data, input_multiple(config), tmp_path / "cache")
    assert again.facts["cache"]["decoded"] == 0 and again.facts["cache"]["reused"] == 8
    in_memory = load_scan(config.data.model_copy(update={"cache": "memory"}), input_multiple(config))
    for i in range(in_memory.train_size + in_memory.val_size):  # the same examples in the same order
        image, labels = again.store.read(i)
        np.testing.assert_array_equal(image, in_memory.images[i])
        np.testing.assert_array_equal(labels, in_memory.labels[i])


def test_auto_image_size_is_raised_to_the_least_a_backbone_builds_with(tmp_path):
    # inceptionv3 needs sides of 75 or more: 64x64 images rounded down to 64 were refused after the scan
    images, masks = write_folder(tmp_path, 6, size=(64, 64))
    raw = {"source": "folder", "images": str(images), "masks": str(masks), "image_size": "auto", "val_fraction": 0.3}
    config = data_config(raw, models=[{"name": "inc", "arch": "Unet", "backbone": "inceptionv3"}, {"name": "r", "arch": "Unet"}])
    resolved, result = resolve_data(config, 32)
    assert resolved.data.image_size == (96, 96)
    assert result.facts["image_size_reason"] == "auto: median source size 64x64 rounded down to a multiple of 32, and raised to 96: the least side every model builds with"
    plain, _ = resolve_data(data_config(raw, models=[{"name": "r", "arch": "Unet"}]), 32)
    assert plain.data.image_size == (64, 64)


@pytest.mark.parametrize("size, source, said", [
    ((96, 96), (32, 32), "; the source images are 32x32 (median of 6): enlarged 3x; image_size: auto keeps about their own size"),
    ((32, 32), (128, 128), "; the source images are 128x128 (median of 6): shrunk 4x; image_size: auto keeps about their own size"),
    ((32, 96), (64, 64), "; the source images are 64x64 (median of 6): stretched; image_size: auto keeps about their own size"),
    ((64, 64), (48, 96), ""),  # within 2x either way: nothing to say
])
def test_a_fixed_image_size_far_from_the_sources_own_says_so(tmp_path, size, source, said):
    """The default 96x96 on 32x32 images trained on 9x their pixels without a word."""
    images, masks = write_folder(tmp_path, 6, size=source)
    raw = {"source": "folder", "images": str(images), "masks": str(masks), "image_size": list(size), "val_fraction": 0.3}
    config = data_config(raw, models=[{"name": "u", "arch": "tiny_unet"}])
    _, result = resolve_data(config, input_multiple(config))
    assert result.facts["image_size_reason"] == "data.image_size" + said


def test_augmentation_is_stateless_consistent_and_resumable(tmp_path):
    images, masks = write_folder(tmp_path, 12, size=(16, 16))
    augment = {"flip_left_right": True, "flip_up_down": True, "rotate90": True, "crop_scale": [0.5, 1.0], "brightness": 0.05}
    config = data_config({"source": "folder", "images": str(images), "masks": str(masks), "augment": augment, "val_fraction": 0.25})
    config, augmented_scan = resolve_data(config)
    plain, plain_scan = resolve_data(data_config({"source": "folder", "images": str(images), "masks": str(masks), "val_fraction": 0.25}))
    scans = {id(config.data): augmented_scan, id(plain.data): plain_scan}

    def batches(spec, start, count):
        data = build_datasets(spec, (5,), start, start + count, scans[id(spec)])
        return [(i.numpy(), m.numpy()) for ((i, m),) in data.train]

    first, second = batches(config.data, 0, 6), batches(config.data, 0, 6)
    for (a, b), (c, d) in zip(first, second):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, d)
    resumed = batches(config.data, 3, 3)  # a pipeline started at step 3 sees steps 3..5 unchanged
    for (a, b), (c, d) in zip(first[3:], resumed):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, d)
    unaugmented = batches(plain.data, 0, 6)
    assert any(not np.array_equal(a, c) for (a, _), (c, _) in zip(first, unaugmented))
    for image, mask in first:  # the bright square moved with its mask: image and mask stay aligned
        bright = image.mean(axis=-1) > 0.55
        assert (bright == (mask[..., 0] > 0.5)).mean() > 0.9


def test_pipeline_functions_are_traced_as_written_with_the_batches_autograph_would_make(tmp_path, monkeypatch):
    """The functions mapped over the datasets skip autograph's rewrite (a cost paid at every run's
    start) and make the same batches, bit for bit, as the rewritten ones, augmentation included."""
    import harness.data.pipeline as pipeline
    from tensorflow.python.autograph.impl import api as autograph_api

    images, masks = write_folder(tmp_path, 8, size=(16, 16))
    augment = {"flip_left_right": True, "rotate90": True, "crop_scale": [0.5, 1.0], "brightness": 0.05}
    folder, folder_scan = resolve_data(data_config({"source": "folder", "images": str(images), "masks": str(masks), "augment": augment, "val_fraction": 0.25}))
    synthetic = validate_config(tiny_config(data={"image_size": [16, 16], "train_size": 8, "val_size": 4, "test_size": 4, "batch_size": 2, "augment": augment}))
    converted = []
    real_convert = autograph_api._convert_actual
    monkeypatch.setattr(autograph_api, "_convert_actual", lambda entity, program_ctx: converted.append(entity.__qualname__) or real_convert(entity, program_ctx))

    def every_batch(spec, data_scan):
        data = build_datasets(spec, (5,), 0, 3, data_scan)
        splits = [[b for (b,) in data.train], list(data.val)] + ([list(data.test)] if data.test is not None else [])
        return [t.numpy() for split in splits for batch in split for t in batch]

    as_written = [every_batch(folder.data, folder_scan), every_batch(synthetic.data, None)]
    assert not [name for name in converted if "make_" in name or "example" in name or "indices" in name or "augment" in name]
    monkeypatch.setattr(pipeline, "graph_code", lambda function: function)  # autograph rewrites them again
    rewritten = [every_batch(folder.data, folder_scan), every_batch(synthetic.data, None)]
    assert any("example" in name for name in converted)  # the check above can see a rewrite
    for ours, theirs in zip(as_written, rewritten):
        assert len(ours) == len(theirs) > 0
        for a, b in zip(ours, theirs):
            np.testing.assert_array_equal(a, b)


def test_real_image_example_end_to_end(tmp_path):
    """`harness sample-data` then the real_images experiment, shortened, through the CLI."""
    data = tmp_path / "skimage"
    made = run_cli("sample-data", data)
    assert made.returncode == 0, made.stderr
    assert len(list((data / "images").iterdir())) == len(list((data / "masks").iterdir())) > 200
    result = run_cli(
        "run", "experiments/real_images.yaml", "--results", tmp_path / "results",
        "--set", "train.epochs=1", "--set", f"data.images={data / 'images'}", "--set", f"data.masks={data / 'masks'}",
        "--set", "output.probe_steps=3", "--set", "output.progress=none",
    )
    assert result.returncode == 0, result.stderr
    (run_dir,) = (tmp_path / "results" / "real_images").glob("2*")
    info = json.loads((run_dir / "run.json").read_text())
    assert info["data"]["source"] == "folder" and info["data"]["image_size"] == [96, 96]
    assert "auto" in info["data"]["image_size_reason"] and info["data"]["skipped"] == 0
    summary = read_csv(run_dir / "summary.csv")
    assert 0.0 <= info["timing"]["input_wait_share"] < 1.0
    assert "input_wait_share" not in summary, "a figure of the run, not repeated on every model's row"
    assert (tmp_path / "results" / "real_images" / ".data-cache").is_dir()


def test_sample_data_refuses_a_folder_of_ones_own_files_and_a_missing_extra_before_writing(tmp_path, monkeypatch):
    # It wrote its 225 tiles among a user's own images (and over their README.txt) without a word;
    # without scikit-image it stopped with a bare ImportError (exit 1).
    (tmp_path / "d" / "images").mkdir(parents=True)
    (tmp_path / "d" / "images" / "holiday.jpg").write_bytes(b"mine")
    (tmp_path / "d" / "images" / "coins_0000_0048.png").write_bytes(b"its own: may be written again")
    refused = run_main("sample-data", tmp_path / "d")
    assert refused.returncode == 2 and "holds 1 file(s) it did not write" in refused.stderr and "holiday.jpg" in refused.stderr, refused.stderr
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "README.txt").write_text("my notes")
    refused = run_main("sample-data", tmp_path / "e")
    assert refused.returncode == 2 and "README.txt" in refused.stderr and not (tmp_path / "e" / "images").exists()
    monkeypatch.setitem(sys.modules, "skimage", None)  # scikit-image not installed
    missing = run_main("sample-data", tmp_path / "f")
    assert missing.returncode == 2 and "sample-data needs scikit-image" in missing.stderr and not (tmp_path / "f").exists(), missing.stderr
    assert (tmp_path / "d" / "images" / "holiday.jpg").read_bytes() == b"mine" and (tmp_path / "e" / "README.txt").read_text() == "my notes"


def test_resume_refuses_data_that_changed_since_the_run_started(tmp_path):
    images, masks = write_folder(tmp_path, 10, size=(16, 16))
    config = tiny_config(data={"source": "folder", "images": str(images), "masks": str(masks), "image_size": [16, 16], "batch_size": 2, "train_size": None, "val_size": None, "val_fraction": 0.3})
    config["train"]["epochs"] = 1
    assert run_main("run", write_yaml(tmp_path / "c.yaml", config), "--results", tmp_path / "results").returncode == 0
    (run_dir,) = (tmp_path / "results" / "tiny").glob("2*")
    info = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps({**info, "status": "interrupted"}))  # as if killed
    moved = tmp_path / "aside.png"
    (images / "ex03.png").rename(moved)
    (masks / "ex03.png").unlink()
    refused = run_main("resume", run_dir)
    assert refused.returncode == 3, refused.stderr
    assert "the data changed since this run started" in refused.stderr
    assert re.search(r"data\.(train|val)_size: (\d+) -> (\d+)", refused.stderr), refused.stderr  # the split ex03 was in shrank


@pytest.mark.slow  # 10-15 s: kept out of the fast tier
def test_resume_refuses_examples_moved_between_splits_by_an_edited_manifest(tmp_path):
    """Swapping a train row and a val row of a manifest's split column keeps every file's content
    and every split's size: the content fingerprints and the sizes saw nothing, and the resumed
    steps trained on a validation image (and validated on a training one)."""
    write_folder(tmp_path / "d", 10, size=(16, 16))
    manifest = tmp_path / "d" / "pairs.csv"

    def write_manifest(val_rows):
        rows = [[f"images/ex{i:02d}.png", f"masks/ex{i:02d}.png", "val" if i in val_rows else "train"] for i in range(10)]
        with manifest.open("w", newline="") as handle:
            csv.writer(handle).writerows([["image", "mask", "split"], *rows])

    write_manifest({7, 8, 9})
    config = tiny_config(data={"source": "csv", "manifest": str(manifest), "image_size": [16, 16], "batch_size": 2, "train_size": None, "val_size": None})
    config["train"]["epochs"] = 1
    assert run_main("run", write_yaml(tmp_path / "c.yaml", config), "--results", tmp_path / "results").returncode == 0
    (run_dir,) = (tmp_path / "results" / "tiny").glob("2*")
    info = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps({**info, "status": "interrupted"}))  # as if killed
    write_manifest({0, 8, 9})  # ex00 to validation, ex07 to training
    refused = run_main("resume", run_dir)
    assert refused.returncode == 3, refused.stderr
    assert "(their content, or the split they are in)" in refused.stderr and "--accept-changed-data" in refused.stderr
    images = tmp_path / "d" / "images"
    assert f"moved: {images / 'ex00.png'} (train -> val)" in refused.stderr and f"moved: {images / 'ex07.png'} (val -> train)" in refused.stderr
    accepted = run_main("resume", run_dir, "--accept-changed-data")
    assert accepted.returncode == 0, accepted.stderr
    assert json.loads((run_dir / "data_fingerprint.json").read_text())["splits"][str(images / "ex00.png")] == "val"


def test_one_folder_for_images_and_masks_and_a_file_for_a_folder_are_named_for_what_they_are(tmp_path):
    """Images and masks in one folder made every image its own mask, refused as a mask of colours
    (the wrong fault); a file where a folder is due was said not to exist."""
    images, masks = write_folder(tmp_path / "data", 4)
    with pytest.raises(ConfigError, match=r"data.images and data.masks are the same folder .*: the masks are files of their own"):
        scan(data_config({"source": "folder", "images": str(images), "masks": f"{images}/"}))
    with pytest.raises(ConfigError, match=r"data.test_images and data.test_masks are the same folder"):
        scan(data_config({"source": "folder", "images": str(images), "masks": str(masks), "test_images": str(masks), "test_masks": str(masks)}))
    with pytest.raises(ConfigError, match=r"data.masks: '.*ex00.png' is a file, not a folder"):
        scan(data_config({"source": "folder", "images": str(images), "masks": str(masks / "ex00.png")}))


def test_an_arrays_brightness_is_decided_over_the_whole_array_not_image_by_image(tmp_path):
    # Decided per image, a dark picture of a 0..255 float array (all values at most 1) was read as
    # 0..1, 255 times too bright beside the others; a 12-bit array's pictures were each stretched to
    # their own brightest pixel; standardised images passed with values below 0.
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (10, 16, 16, 3)).astype(np.float32)
    y = (rng.uniform(0, 1, (10, 16, 16)) > 0.5).astype(np.uint8)

    def scanned(images, name):
        np.savez(tmp_path / f"{name}.npz", images=images[:8], masks=y[:8], val_images=images[8:], val_masks=y[8:])
        return scan(data_config({"source": "arrays", "arrays": str(tmp_path / f"{name}.npz")}))

    bright = x * 255
    bright[3] = x[3] / 2  # a dark picture: every value at most 0.5 of 255
    np.testing.assert_allclose(scanned(bright, "dark").images[3], x[3] / 2 / 255, rtol=1e-6)
    twelve_bit = np.round(x * 4095).astype(np.uint16)
    twelve_bit[5] //= 16  # a dim picture of the same 12-bit scale
    result = scanned(twelve_bit, "bits")
    np.testing.assert_allclose(result.images[5].astype(float), np.floor(twelve_bit[5] / 4095 * 255), atol=1)
    overshoot = x.copy()
    overshoot[2, 0, 0, 0] = 1.03  # what a bicubic resize leaves
    with pytest.raises(DataError) as error:
        scanned(overshoot, "over")
    assert len(error.value.problems) == 1 and error.value.problems[0].startswith("over.npz[2]: image values range 0..1.03, outside 0..1")
    with pytest.raises(DataError) as error:
        scanned((x - 0.5) / 0.29, "z")
    assert len(error.value.problems) == 10 and "standardised images" in error.value.problems[0]
    dim_validation = x * 255
    dim_validation[8:] = x[8:] / 2  # validation arrays of dim pictures, of the training arrays' scale
    np.testing.assert_allclose(scanned(dim_validation, "dimval").images[8:], x[8:] / 2 / 255, rtol=1e-6)


def test_label_map_folds_a_trimap_into_classes_and_is_part_of_the_cache_key(tmp_path):
    # oxford_iiit_pet's masks are trimaps (1 pet, 2 background, 3 border): refused as labels
    # outside 0..1 with nothing in the config to say what they are.
    images, masks = tmp_path / "d" / "images", tmp_path / "d" / "masks"
    images.mkdir(parents=True)
    masks.mkdir(parents=True)
    truth = {}
    for i in range(10):
        image, mask = picture(i, (16, 16))
        trimap = np.where(mask == 1, 1, 2).astype(np.uint8)
        trimap[0, :] = 3  # a border row
        Image.fromarray(image).save(images / f"ex{i:02d}.png")
        Image.fromarray(trimap).save(masks / f"ex{i:02d}.png")
        truth[f"ex{i:02d}"] = np.where(trimap == 2, 0, 1)
    raw = {"source": "folder", "images": str(images), "masks": str(masks), "val_fraction": 0.3}
    with pytest.raises(DataError) as error:
        scan(data_config(raw))
    assert "labels outside 0..1 (2, 3)" in error.value.problems[0] and "data.label_map" in error.value.problems[0]
    mapped = {**raw, "label_map": {1: 1, 2: 0, 3: 1}}
    result = scan(data_config(mapped))
    assert sorted(np.unique(result.labels).tolist()) == [0, 1]
    assert sorted(int(m.sum()) for m in result.labels) == sorted(int(t.sum()) for t in truth.values())
    cache = tmp_path / "cache"
    on_disk = scan(data_config({**mapped, "cache": "disk"}), cache)
    assert on_disk.facts["label_counts"] == result.facts["label_counts"]
    with pytest.raises(DataError):  # the shards of the mapped masks are not reused without the map
        scan(data_config({**raw, "cache": "disk"}), cache)
    with pytest.raises(ConfigError, match=r"label_map: \{3: 2\} maps to classes outside 0..1"):
        data_config({**raw, "label_map": {1: 1, 2: 0, 3: 2}})
    with pytest.raises(ConfigError, match="label_map"):
        data_config({"source": "synthetic", "label_map": {255: 0}})


def test_an_exif_orientation_is_named_not_applied(tmp_path):
    # A phone's photo is stored unturned with a tag saying "turn me"; a mask drawn in a tool that
    # obeys the tag is turned against it. The size mismatch said only "image is 24x16 but its mask
    # is 16x24", and a square photo went through without a word.
    images, masks = write_folder(tmp_path / "d", 10, size=(16, 16))
    for stem, size in (("ex00", (24, 16)), ("ex01", (16, 16))):
        exif = Image.Exif()
        exif[0x0112] = 6  # rotate 90 degrees to display
        Image.new("RGB", size).save(images / f"{stem}.jpg", exif=exif)
        (images / f"{stem}.png").unlink()
    Image.fromarray(np.zeros((24, 16), np.uint8)).save(masks / "ex00.png")
    raw = {"source": "folder", "images": str(images), "masks": str(masks), "val_fraction": 0.3}
    with pytest.raises(DataError) as error:
        scan(data_config(raw))
    (problem,) = error.value.problems
    assert problem.startswith(f"{images / 'ex00.jpg'}: image is 24x16 but its mask is 16x24; the image has an EXIF orientation tag")
    result = scan(data_config({**raw, "on_bad_data": "skip"}))
    assert any(note.startswith("1 item(s): the image has an EXIF orientation tag") for note in result.facts["notes"])


def test_exif_orientation_apply_turns_photos_and_their_size_as_a_viewer_shows_them(tmp_path):
    # Phone photos stored 24 wide and 16 high with "turn 90 degrees clockwise" (orientation 6),
    # masks drawn on the turned, portrait picture (16 wide, 24 high): refused as stored, read turned
    # with data.exif_orientation: apply, the pixels where a viewer shows them.
    (tmp_path / "images").mkdir()
    (tmp_path / "masks").mkdir()
    rng = np.random.default_rng(0)
    stored = {}
    for i in range(6):
        pixels = rng.integers(0, 256, (16, 24, 3), dtype=np.uint8)
        exif = Image.Exif()
        exif[0x0112] = 6
        Image.fromarray(pixels).save(tmp_path / "images" / f"p{i}.png", exif=exif)
        Image.fromarray((rng.uniform(size=(24, 16)) > 0.5).astype(np.uint8)).save(tmp_path / "masks" / f"p{i}.png")
        stored[i] = pixels
    raw = {"source": "folder", "images": str(tmp_path / "images"), "masks": str(tmp_path / "masks"), "val_fraction": 0.3, "image_size": "auto"}
    with pytest.raises(DataError, match="the image has an EXIF orientation tag"):
        scan(data_config(raw))
    result = scan(data_config({**raw, "exif_orientation": "apply"}))
    assert result.image_size == (24, 16) and result.images.shape[0] == 6  # auto: the turned pictures' size
    turned = sorted(np.rot90(p, k=-1).tobytes() for p in stored.values())  # clockwise, as orientation 6 says
    assert sorted(image.tobytes() for image in result.images) == turned
    assert any(note.startswith("6 item(s): the image's EXIF orientation tag was applied") for note in result.facts["notes"])
    with pytest.raises(ConfigError, match="exif_orientation"):
        data_config({"source": "arrays", "arrays": str(tmp_path / "a.npz"), "exif_orientation": "apply"})


def test_a_manifests_columns_are_read_whatever_their_case_and_unmarked_rows_beside_val_ones_are_noted(tmp_path):
    # "Image,Mask,Split" was refused as missing image and mask; "image,mask,Split" trained with
    # the split column ignored; rows without a split beside rows marked val lost a fifth of them
    # to validation without a word.
    write_folder(tmp_path / "d", 10)
    rows = [f"images/ex{i:02d}.png,masks/ex{i:02d}.png,{'val' if i >= 8 else ''}" for i in range(10)]
    for header in ("Image, Mask ,Split", "image,mask,Split"):
        (tmp_path / "d" / "pairs.csv").write_text(header + "\n" + "\n".join(rows) + "\n")
        result = scan(data_config({"source": "csv", "manifest": str(tmp_path / "d" / "pairs.csv"), "val_fraction": 0.3}))
        assert result.val_size >= 2 and result.train_size + result.val_size == 10
        assert [n for n in result.facts["notes"] if "without a split" in n] == [
            "8 item(s): manifest rows without a split, divided by data.val_fraction (and data.test_fraction) beside the rows marked val; "
            "mark them train to train on all of them"
        ]
    (tmp_path / "d" / "pairs.csv").write_text("image;mask\n" + "\n".join(r.rsplit(",", 1)[0].replace(",", ";") for r in rows) + "\n")
    with pytest.raises(ConfigError, match="separated by commas; missing: image, mask \\(its first line: 'image;mask'\\)"):
        scan(data_config({"source": "csv", "manifest": str(tmp_path / "d" / "pairs.csv")}))


def test_hidden_files_in_a_folder_are_not_examples(tmp_path):
    # macOS leaves "._ex02.png" (its metadata) beside each file it copies to another drive format:
    # each was refused as an image without a mask, or a mask that does not decode.
    images, masks = write_folder(tmp_path / "d", 10)
    (masks / "._ex02.png").write_bytes(b"\0\5\26\7\0\2\0\0Mac OS X")
    (images / "._ex02.png").write_bytes(b"\0\5\26\7\0\2\0\0Mac OS X")
    (images / ".hidden.png").write_bytes(b"\0")
    result = scan(data_config({"source": "folder", "images": str(images), "masks": str(masks), "val_fraction": 0.3}))
    assert result.facts["listed"] == 10 and result.facts["skipped"] == 0


def test_data_larger_than_the_available_memory_is_refused_before_decoding(tmp_path, monkeypatch):
    # 20,000 phone photos at image_size auto (their median, 4032x3024) held in memory: the kernel
    # killed the scan with no word. Refused now before anything is decoded, with the way out.
    from harness.data import scan as scanning
    from harness.errors import ResourceError

    images, masks = write_folder(tmp_path / "d", 10, size=(16, 16))
    raw = {"source": "folder", "images": str(images), "masks": str(masks), "val_fraction": 0.3}
    per_example = 16 * 16 * 4  # RGB, then one byte a label
    decoded = []
    monkeypatch.setattr(scanning, "_load_item", lambda *a: decoded.append(a) or "not decoded")
    monkeypatch.setattr(scanning, "memory_bytes", lambda: (2**30, 2 * 10 * per_example - 1))
    with pytest.raises(ResourceError, match=r"10 examples at 16x16 \(data.image_size\) take about 0.0 GiB held in memory \(2 copies of 0.00 MiB each\).*set data.cache: disk"):
        scan(data_config(raw))
    assert decoded == []
    monkeypatch.undo()
    monkeypatch.setattr(scanning, "memory_bytes", lambda: (2**30, 3 * 10 * per_example))
    held = scan(data_config(raw)).facts["memory"]
    assert held == {"bytes": 2 * 10 * per_example, "available_bytes": 3 * 10 * per_example}
    assert "leaving little for the models: data.cache: disk" in scanning.memory_warning(held)
    assert scanning.memory_warning({"bytes": 10, "available_bytes": 30}) is None
    assert scanning.memory_warning({"bytes": 10, "available_bytes": None}) is None


def test_webp_images_are_read_and_a_partner_in_another_format_or_folder_is_named(tmp_path):
    # A .webp image was passed over, and its mask then refused as "no image with the stem 'ex06'",
    # as was one whose image was in a format harness does not read, or sat in a folder below.
    images, masks = write_folder(tmp_path / "d", 10)
    Image.open(images / "ex06.png").save(images / "ex06.webp", lossless=True)
    (images / "ex06.png").unlink()
    (images / "ex07.png").rename(images / "ex07.heic")  # a phone's format harness does not read
    (images / "sub").mkdir()
    (images / "ex08.png").rename(images / "sub" / "ex08.png")
    with pytest.raises(DataError) as error:
        scan(data_config({"source": "folder", "images": str(images), "masks": str(masks), "val_fraction": 0.3}))
    assert error.value.problems == [
        f"{masks / 'ex07.png'}: no image with the stem 'ex07' in {images} (ex07.heic is there, a format harness does not read: "
        ".png, .jpg, .jpeg, .bmp, .tif, .tiff, .webp, .gif)",
        f"{masks / 'ex08.png'}: no image with the stem 'ex08' in {images} (sub/ex08.png is in a folder below it; the folders below are not read)",
    ]


def test_a_missing_relative_folder_says_where_it_was_looked_for(tmp_path, monkeypatch):
    # experiments/real_images.yaml run from another folder: "folder 'data/skimage/images' does not
    # exist", with nothing to say that relative paths are read from the current folder.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=rf"folder 'data/images' does not exist \(a relative path is read from the current folder, {re.escape(str(tmp_path))}\)"):
        scan(data_config({"source": "folder", "images": "data/images", "masks": "data/masks"}))
    with pytest.raises(ConfigError) as absolute:
        scan(data_config({"source": "folder", "images": str(tmp_path / "x"), "masks": str(tmp_path / "y")}))
    assert str(absolute.value).endswith("does not exist")


def test_test_fraction_beside_a_validation_folder_takes_its_share_of_the_training_files(tmp_path):
    # With data.val_images given, every file of the main folder was marked train: test_fraction
    # found nothing to take ("no test examples (data.test_fraction 0.2 of 38 files ...)"), and an
    # explicit val_fraction was ignored without a word.
    images, masks = write_folder(tmp_path / "train", 30)
    val_images, val_masks = write_folder(tmp_path / "val", 8)
    raw = {"source": "folder", "images": str(images), "masks": str(masks), "val_images": str(val_images), "val_masks": str(val_masks)}
    result = scan(data_config({**raw, "test_fraction": 0.2}))
    assert result.val_size == 8 and result.test_size > 0 and result.train_size + result.test_size == 30
    assert (result.train_size, result.val_size) == (scan(data_config(raw)).train_size - result.test_size, 8)
    with pytest.raises(ConfigError, match="val_fraction: the validation split is data.val_images, so val_fraction would not be read"):
        data_config({**raw, "val_fraction": 0.3})
    rng = np.random.default_rng(0)
    x, y = rng.uniform(0, 1, (20, 16, 16, 3)).astype(np.float32), (rng.uniform(0, 1, (20, 16, 16)) > 0.5).astype(np.uint8)
    np.savez(tmp_path / "d.npz", images=x[:16], masks=y[:16], val_images=x[16:], val_masks=y[16:])
    arrays = scan(data_config({"source": "arrays", "arrays": str(tmp_path / "d.npz"), "test_fraction": 0.25}))
    assert arrays.val_size == 4 and arrays.test_size > 0 and arrays.train_size + arrays.test_size == 16


def test_a_binary_mask_with_grey_edges_is_told_how_to_threshold_it(tmp_path):
    # A 0/255 mask resized with interpolation has grey edges: it was told to use data.label_map
    # ("{255: 0} for a void border"), which is not what its many stray values need.
    images, masks = write_folder(tmp_path / "d", 10)
    grey = np.asarray(Image.open(masks / "ex03.png")).copy()
    grey[0, :5] = [1, 64, 128, 200, 254]
    Image.fromarray(grey).save(masks / "ex03.png")
    with pytest.raises(DataError) as error:
        scan(data_config({"source": "folder", "images": str(images), "masks": str(masks), "val_fraction": 0.3}))
    (problem,) = error.value.problems
    assert "labels outside 0..1 (64, 128, 200, 254, 255)" in problem and "grey levels between 0 and 255" in problem
    assert "threshold them: data.mask_threshold: 127" in problem and "label_map" not in problem
    thresholded = scan(data_config({"source": "folder", "images": str(images), "masks": str(masks), "val_fraction": 0.3, "mask_threshold": 127}))
    assert sorted(np.unique(thresholded.labels).tolist()) == [0, 1]


def test_a_tfds_version_still_being_written_is_passed_over_and_a_broken_info_file_named(tmp_path):
    # TFDS writes a version into "1.0.1.incomplete<random>" and renames it when done: sorted as the
    # newest version, it was read half-written; a dataset_info.json that is not JSON was a bug's
    # traceback (exit 1).
    root = write_tfds(tmp_path / "tfds")
    stopped = root / "shapes_seg" / "1.0.1.incompleteQ6X2"
    stopped.mkdir()
    (stopped / "dataset_info.json").write_text('{"name": "shapes_seg", "version": "1.0.1"}')
    config = data_config({"source": "tfds", "tfds": {"name": "shapes_seg", "data_dir": str(root)}})
    assert (scan(config).train_size, scan(config).val_size) == (6, 2)
    (root / "shapes_seg" / "1.0.0" / "dataset_info.json").write_text('{"name": "shapes_seg", "vers')
    with pytest.raises(DataError, match=r"1.0.0/dataset_info.json cannot be read: .*prepare the dataset again"):
        scan(config)


def test_a_truncated_tfds_shard_is_bad_data_naming_it_and_what_it_held_before_stays(tmp_path):
    # A shard cut short (a copy that stopped) raised TensorFlow's DataLossError out of the scan:
    # "internal error", exit 1.
    root = write_tfds(tmp_path / "tfds")
    (shard,) = (root / "shapes_seg" / "1.0.0").glob("*-train.tfrecord*")
    shard.write_bytes(shard.read_bytes()[:-50])
    config = data_config({"source": "tfds", "tfds": {"name": "shapes_seg", "data_dir": str(root)}})
    with pytest.raises(DataError) as error:
        scan(config)
    assert error.value.problems == [f"{shard}: cannot be read past its first 5 record(s) (DataLossError: the file is truncated or corrupt); prepare the dataset again"]
    kept = scan(data_config({"source": "tfds", "tfds": {"name": "shapes_seg", "data_dir": str(root)}, "on_bad_data": "skip"}))
    assert (kept.train_size, kept.val_size) == (5, 2)


def test_a_cut_or_damaged_npz_is_bad_data_naming_it(tmp_path):
    # An .npz cut short (a copy that stopped) raised zipfile.BadZipFile out of the scan: exit 1.
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", images=rng.uniform(0, 1, (10, 16, 16, 3)), masks=np.zeros((10, 16, 16), np.uint8))
    whole = (tmp_path / "d.npz").read_bytes()
    (tmp_path / "cut.npz").write_bytes(whole[: len(whole) // 2])
    damaged = bytearray(whole)
    damaged[len(whole) // 3 : len(whole) // 3 + 64] = bytes(64)
    (tmp_path / "damaged.npz").write_bytes(bytes(damaged))
    for name, why in (("cut", "File is not a zip file"), ("damaged", "Bad CRC-32 for file 'images.npy'")):
        with pytest.raises(DataError, match=rf"data.arrays .*{name}.npz: cannot be read as .npz: {why}"):
            scan(data_config({"source": "arrays", "arrays": str(tmp_path / f"{name}.npz")}))


def test_masks_named_by_their_images_stem_and_a_suffix(tmp_path):
    # Carvana's masks are "<stem>_mask.gif": every image was "no mask with the stem", every mask "no
    # image with the stem", and GIF was not read at all.
    images, masks = write_folder(tmp_path / "d", 10)
    for mask in sorted(masks.glob("*.png")):
        Image.fromarray(np.asarray(Image.open(mask)) // 255).convert("P").save(masks / f"{mask.stem}_mask.gif")
        mask.unlink()
    raw = {"source": "folder", "images": str(images), "masks": str(masks), "val_fraction": 0.3}
    with pytest.raises(ConfigError, match="no mask has an image's stem; 10 of 10 masks are named by an image's stem followed by '_mask': set data.mask_suffix: '_mask'"):
        scan(data_config(raw))
    result = scan(data_config({**raw, "mask_suffix": "_mask"}))
    assert result.train_size + result.val_size == 10 and sorted(np.unique(result.labels).tolist()) == [0, 1]
    (masks / "ex03_mask.gif").unlink()
    with pytest.raises(DataError) as error:
        scan(data_config({**raw, "mask_suffix": "_mask"}))
    assert error.value.problems == [f"{images / 'ex03.png'}: no mask with the stem 'ex03_mask' in {masks}"]


def test_images_kept_in_folders_below_are_pointed_to(tmp_path):
    # One folder per city (Cityscapes): the scan said only "no examples found".
    images, masks = write_folder(tmp_path / "d" / "x", 4)
    for folder in ("images", "masks"):
        (tmp_path / "d" / folder).mkdir()
        (tmp_path / "d" / "x" / folder).rename(tmp_path / "d" / folder / "aachen")
    with pytest.raises(DataError, match=r"no examples found in .*; the images are in 1 folder\(s\) below .* \(aachen/ 4 images\), which are not read"):
        scan(data_config({"source": "folder", "images": str(tmp_path / "d" / "images"), "masks": str(tmp_path / "d" / "masks")}))


def test_a_folder_of_which_only_some_images_are_annotated_is_said_to_be_so(tmp_path):
    # Pascal VOC's JPEGImages holds 17,125 images and SegmentationClass 2,913 masks: 14,212 lines of
    # "no mask", and nothing said what they meant together.
    images, masks = write_folder(tmp_path / "d", 20)
    for path in sorted(masks.glob("*.png"))[6:]:
        path.unlink()
    raw = {"source": "folder", "images": str(images), "masks": str(masks), "val_fraction": 0.5}
    with pytest.raises(DataError, match=rf"14 images in {re.escape(str(images))} have no mask and every mask has its image: .* "
                                        r"data.on_bad_data: skip trains on the 6 pairs:") as error:
        scan(data_config(raw))
    assert len(error.value.problems) == 14  # each still named
    result = scan(data_config({**raw, "on_bad_data": "skip"}))
    assert result.train_size + result.val_size == 6
    (masks / "stray.png").write_bytes((masks / "ex00.png").read_bytes())  # a mask without its image: not that case
    with pytest.raises(DataError) as error:
        scan(data_config(raw))
    assert "have no mask and every mask has its image" not in str(error.value)


def test_binary_masks_with_grey_levels_are_thresholded_when_asked(tmp_path):
    # Kvasir-SEG's masks are JPEG: every one was refused for its compression artefacts, and the way
    # out was to convert them all. data.mask_threshold reads them as foreground above it.
    images, masks = write_folder(tmp_path / "d", 10, size=(16, 16))
    truth = {}
    for path in sorted(masks.glob("*.png")):
        labels = np.asarray(Image.open(path)) > 0
        truth[path.stem] = labels
        Image.fromarray((labels * 255).astype(np.uint8)).convert("RGB").save(masks / f"{path.stem}.jpg", quality=85)
        path.unlink()
    raw = {"source": "folder", "images": str(images), "masks": str(masks), "val_fraction": 0.3}
    with pytest.raises(DataError) as error:
        scan(data_config(raw))
    assert "compression artefacts; save masks as PNG; or, binary masks, data.mask_threshold: 127" in error.value.problems[0]
    result = scan(data_config({**raw, "mask_threshold": 127}))
    assert sorted(np.unique(result.labels).tolist()) == [0, 1] and result.train_size + result.val_size == 10
    expected = sum(int(t.sum()) for t in truth.values())
    assert abs(int(result.labels.sum()) - expected) <= 0.02 * expected  # the shapes, up to a few edge pixels of the JPEG
    assert any("binary mask thresholded: values above 127" in note for note in result.facts["notes"])
    for wrong in ({"classes": 3}, {"ignore_label": 255}, {"label_map": {255: 1}}):
        with pytest.raises(ConfigError, match="mask_threshold makes binary masks"):
            data_config({**raw, "mask_threshold": 127, **wrong})


def test_images_and_masks_that_each_add_a_suffix_to_a_shared_stem(tmp_path):
    # Cityscapes: aachen_000000_000019_leftImg8bit.png and aachen_000000_000019_gtFine_labelIds.png.
    # All 12 files were refused one by one, with nothing to say how they pair.
    images, masks = write_folder(tmp_path / "d", 10)
    for folder, suffix in ((images, "_leftImg8bit"), (masks, "_gtFine_labelIds")):
        for path in sorted(folder.glob("*.png")):
            path.rename(folder / f"city_{path.stem}_000019{suffix}.png")
    for path in sorted(masks.glob("*.png")):  # Cityscapes keeps a colour picture of each mask beside it
        Image.new("RGB", (32, 32), (128, 64, 128)).save(str(path).replace("_gtFine_labelIds", "_gtFine_color"))
    raw = {"source": "folder", "images": str(images), "masks": str(masks), "val_fraction": 0.3}
    with pytest.raises(ConfigError, match="set data.image_suffix: '_leftImg8bit' and data.mask_suffix: '_gtFine_labelIds'"):
        scan(data_config(raw))
    paired = {**raw, "image_suffix": "_leftImg8bit", "mask_suffix": "_gtFine_labelIds"}
    result = scan(data_config(paired))
    assert result.train_size + result.val_size == 10  # the colour pictures are other files, not masks without images
    assert f"10 item(s): mask files in {masks} whose names do not end in '_gtFine_labelIds' (data.mask_suffix): not read" in result.facts["notes"]
    (images / "city_ex03_000019_leftImg8bit.png").unlink()
    with pytest.raises(DataError) as error:
        scan(data_config(paired))
    assert error.value.problems == [f"{masks / 'city_ex03_000019_gtFine_labelIds.png'}: no image with the stem 'city_ex03_000019_leftImg8bit' in {images}"]


def test_docs_cityscapes_manifest_recipe_runs_as_written_and_its_split_is_kept(tmp_path, monkeypatch):
    """docs/data.md's script for a Cityscapes tree (cities below train/ and val/), run as written
    from the folder holding `cityscapes/`, then read as the page says: `source: csv` with a
    label_map from label ids to training classes and the void ids left out."""
    from conftest import page_blocks

    (recipe,) = page_blocks("docs/data.md", "python")
    root = tmp_path / "cityscapes"
    for split, city, count in (("train", "aachen", 3), ("train", "bochum", 2), ("val", "lindau", 2)):
        for i in range(count):
            stem = f"{city}_{i:06d}_000019"
            image, mask = picture(i)
            for folder, name, pixels in (("leftImg8bit", f"{stem}_leftImg8bit.png", image), ("gtFine", f"{stem}_gtFine_labelIds.png", mask * 19 + 7)):
                (root / folder / split / city).mkdir(parents=True, exist_ok=True)
                Image.fromarray(pixels.astype(np.uint8)).save(root / folder / split / city / name)  # ids 7 (road) and 26 (car)
            Image.fromarray(np.zeros((24, 32), np.uint8)).save(root / "gtFine" / split / city / f"{stem}_gtFine_color.png")
    monkeypatch.chdir(tmp_path)
    exec(compile(recipe, "docs/data.md", "exec"), {})
    config = data_config({"source": "csv", "manifest": "cityscapes.csv", "classes": 19, "label_map": {7: 0, 26: 13, 0: 255}, "ignore_label": 255})
    result = scan(config)
    assert (result.train_size, result.val_size) == (5, 2), "the dataset's own split, city by city"
    assert sorted(np.unique(result.labels).tolist()) == [0, 13]


def test_sample_data_removes_specks_of_30_pixels_or_fewer_joined_by_edges_with_any_scikit_image():
    """The masks' speck rule is counted by harness: skimage's `max_size` keyword exists only from
    0.26, and Python 3.10 gets 0.25 (its `sample-data` failed there)."""
    from harness.data.sample_data import without_specks

    objects = np.zeros((20, 40), bool)
    objects[1:7, 1:6] = True  # 30 pixels: a speck
    objects[10:17, 1:6] = objects[10, 6] = True  # 36 pixels: kept
    objects[1:6, 10:16] = True  # 30 pixels again, and a 1-pixel speck at its corner: joined only diagonally
    objects[6, 16] = True
    objects[10:16, 20:26] = objects[16, 20] = True  # 37 pixels: kept
    kept = without_specks(objects)
    assert kept.dtype == bool and kept.sum() == 36 + 37
    assert kept[10:17, 1:6].all() and kept[10, 6] and kept[10:16, 20:26].all() and kept[16, 20]
    assert not kept[1:7, 1:6].any() and not kept[1:6, 10:16].any() and not kept[6, 16]
