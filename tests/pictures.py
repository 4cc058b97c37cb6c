"""Real data files for the tests: pictures whose bright square is the mask, written as folders,
TFDS datasets on disk, and configs and scans over them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from conftest import tiny_config
from PIL import Image

from harness.config.loading import validate_config
from harness.core.backend import import_tf
from harness.data.resolve import load_scan
from harness.members.registry import input_multiple

tf = import_tf()


def picture(seed: int, size=(24, 32)) -> tuple[np.ndarray, np.ndarray]:
    """An RGB image whose bright square is exactly the mask's foreground."""
    rng = np.random.default_rng(seed)
    mask = np.zeros(size, np.uint8)
    top, left = rng.integers(0, size[0] - 8), rng.integers(0, size[1] - 8)
    mask[top : top + 8, left : left + 8] = 1
    image = (rng.uniform(0, 60, (*size, 3)) + 180 * mask[..., None]).astype(np.uint8)
    return image, mask


def write_folder(root: Path, count: int = 10, image_ext: str = ".png", size=(24, 32)) -> tuple[Path, Path]:
    images, masks = root / "images", root / "masks"
    images.mkdir(parents=True)
    masks.mkdir(parents=True)
    for i in range(count):
        image, mask = picture(i, size)
        Image.fromarray(image).save(images / f"ex{i:02d}{image_ext}")
        Image.fromarray(mask * 255).save(masks / f"ex{i:02d}.png")
    return images, masks


def data_config(data: dict, **changes):
    base = tiny_config(data={"image_size": [16, 16], "batch_size": 2, "train_size": None, "val_size": None, **data}, **changes)
    return validate_config(base)


def scan(config, cache=None):
    return load_scan(config.data, input_multiple(config), cache)


def write_tfds(root: Path, name: str = "shapes_seg", version: str = "1.0.0") -> Path:
    """A prepared dataset in TFDS's on-disk layout: dataset_info.json and TFRecord shards of
    tf.train.Example with PNG-encoded image and segmentation_mask features."""
    folder = root / name / version
    folder.mkdir(parents=True)
    for split, count in (("train", 6), ("test", 2)):
        with tf.io.TFRecordWriter(str(folder / f"{name}-{split}.tfrecord-00000-of-00001")) as writer:
            for i in range(count):
                image, mask = picture(i + (100 if split == "test" else 0), (16, 16))
                feature = {
                    "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[tf.io.encode_png(image).numpy()])),
                    "segmentation_mask": tf.train.Feature(bytes_list=tf.train.BytesList(value=[tf.io.encode_png(mask[..., None]).numpy()])),
                }
                writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    (folder / "dataset_info.json").write_text(json.dumps({"name": name, "version": version, "splits": [{"name": "train"}, {"name": "test"}]}))
    return root
