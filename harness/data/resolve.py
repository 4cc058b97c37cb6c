"""From a config's `data` section to data a run can use: for a real source, list the examples,
take the scan from the disk cache or scan them (exit 3 naming every bad item unless
`on_bad_data: skip`), and fill the sizes found into the config. The scan is returned to the
caller, which passes it on to the pipeline, the probes and the samples: nothing is kept in a
module-level memo, so two runs in one process never share data by accident."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.config.schema import DataSpec, ExperimentConfig
from harness.data.disk_scan import scan_to_disk
from harness.data.fingerprint import fingerprints
from harness.data.scan import Scan, scan_items
from harness.data.splits import split_of
from harness.data.sources import list_items
from harness.errors import ConfigError, DataError


def resolve_data(config: ExperimentConfig, multiple: int = 1, cache_dir: Path | None = None) -> tuple[ExperimentConfig, Scan | None]:
    """The config with the sizes the scan found, and the scan (None for synthetic data).
    `multiple`: each side of the input must be a multiple of it, and none below its models' least
    side (for `image_size: auto`)."""
    spec = config.data
    if spec.source == "synthetic":
        return config, None
    scan = load_scan(spec, multiple, cache_dir, config.least_side())
    data = spec.model_copy(update={"image_size": scan.image_size, "train_size": scan.train_size, "val_size": scan.val_size, "test_size": scan.test_size})
    if data.batch_size > data.train_size:
        raise DataError(f"data.batch_size {data.batch_size} is larger than the {data.train_size} training examples found")
    if spec.augment.rotate90 and data.image_size[0] != data.image_size[1]:
        raise ConfigError(f"data.augment.rotate90 needs square images, image_size is {data.image_size[0]}x{data.image_size[1]}")
    return config.model_copy(update={"data": data}), scan


def load_scan(spec: DataSpec, multiple: int, cache_dir: Path | None = None, least: int = 1) -> Scan:
    """The scan of a real source: held in memory, or with `data.cache: disk` written to (and read
    from) the on-disk store under `cache_dir`, reusing every shard whose files did not change."""
    items = list_items(spec)
    if spec.cache == "disk" and cache_dir is not None:
        scan = scan_to_disk(items, spec, multiple, cache_dir, least)
    else:
        scan = scan_items(items, spec, multiple, least)
    scan.fingerprints = fingerprints(items)
    scan.splits = {item.name: split_of(item, spec.val_fraction, spec.test_fraction) for item in items}
    return scan


def data_facts(spec: DataSpec, scan: Scan | None) -> dict[str, Any]:
    """What run.json says about the data: the scan's findings, or the synthetic task's sizes."""
    if scan is not None:
        return scan.facts
    return {"source": spec.source, "image_size": list(spec.image_size), "train_size": spec.train_size, "val_size": spec.val_size, "test_size": spec.test_size}
