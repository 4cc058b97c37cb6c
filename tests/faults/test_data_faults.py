"""Fault trials on the data: bytes of the on-disk store flipped under the same size, and images
edited in place between an interruption and its resume. Each fault is injected the way it
arrives: on the real files a run reads."""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path

import numpy as np
import pytest
from conftest import run_dirs, run_main, tiny_config, write_yaml
from pictures import data_config, scan, write_folder

from harness.data.store import shard_paths
from harness.errors import DataError


def streamed(root, count=40):
    images, masks = write_folder(root, count, size=(16, 16))
    return {"source": "folder", "images": str(images), "masks": str(masks), "val_fraction": 0.25, "cache": "disk"}


def flip_bytes_in_the_middle(path, count=64):
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + count] = bytes(255 - b for b in data[middle : middle + count])
    stat = path.stat()
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # size and time unchanged: only the bytes differ
    return middle


def test_a_flipped_record_is_rebuilt_from_its_intact_source_and_reads_the_same(tmp_path, capfd):
    config = data_config(streamed(tmp_path))
    cache = tmp_path / "cache"
    first = scan(config, cache)
    truth = [first.store.read(i) for i in range(first.train_size + first.val_size)]
    victim = max(cache.glob("shard-*.bin"), key=lambda p: p.stat().st_size)
    flip_bytes_in_the_middle(victim)
    again = scan(config, cache)
    assert again.facts["cache"]["decoded"] == 0, "same size, same sources: the scan reuses the shard"
    for i, (image, labels) in enumerate(truth):
        got_image, got_labels = again.store.read(i)
        np.testing.assert_array_equal(got_image, image)
        np.testing.assert_array_equal(got_labels, labels)
    err = capfd.readouterr().err
    assert "failed its checksum" in err and victim.name in err
    third = scan(config, cache)  # repaired on disk: read again without a rebuild
    third.store.read(0)
    assert "failed its checksum" not in capfd.readouterr().err


def test_a_reader_holding_the_descriptor_of_a_shard_being_rebuilt_reads_on(tmp_path):
    # tf.data reads examples in parallel: one reader can have taken a shard's descriptor when
    # another finds a bad record and rebuilds that shard. Closing the descriptor then made the first
    # reader's read fail (EBADF: a run's internal error, seen once in the suite) or, its number
    # reused by the next open, read another file than the one it took.
    config = data_config(streamed(tmp_path))
    cache = tmp_path / "cache"
    truth = scan(config, cache).store.read(0)
    store = scan(config, cache).store
    flip_bytes_in_the_middle(shard_paths(cache, store.shards[0].key)[0])
    held = store._descriptor(0)  # what a reader about to read example 0 holds
    taken = os.fstat(held).st_ino
    bad = next(i for i in range(store.shards[0].count) if zlib.crc32(os.pread(held, store.shape.size, i * store.shape.size)) != store.shards[0].info["crc32"][i])
    store.read(bad)  # another reader: the bad record, so the shard is rebuilt
    raw = os.pread(held, store.shape.size, 0)  # the first reader reads on, through the old descriptor
    assert len(raw) == store.shape.size and os.fstat(held).st_ino == taken  # the file it took, still open
    np.testing.assert_array_equal(store.read(0)[0], truth[0])
    store.close()


def test_a_flipped_record_whose_source_is_gone_is_named_as_bad_data(tmp_path):
    config = data_config(streamed(tmp_path))
    cache = tmp_path / "cache"
    scan(config, cache)
    victim = max(cache.glob("shard-*.bin"), key=lambda p: p.stat().st_size)
    info = json.loads(victim.with_suffix(".json").read_text())
    middle = flip_bytes_in_the_middle(victim, count=8)
    item = info["items"][middle // info["record_size"]]
    again = scan(config, cache)  # the run has scanned its data; then the source goes, then the bytes are read
    Path(item).unlink()  # a folder source names an item by its image's path
    with pytest.raises(DataError, match=f"{item} changed or is gone since the data store was written"):
        for i in range(again.train_size + again.val_size):
            again.store.read(i)


@pytest.mark.slow
def test_a_run_on_a_store_with_flipped_bytes_trains_exactly_as_on_the_true_data(tmp_path):
    raw = tiny_config(data={**streamed(tmp_path), "batch_size": 4}, train={"epochs": 1, "steps_per_call": 2})
    path = write_yaml(tmp_path / "c.yaml", raw)
    assert run_main("run", path, "--results", tmp_path / "r").returncode == 0
    (first,) = run_dirs(tmp_path / "r")
    for shard in (tmp_path / "r" / "tiny" / ".data-cache").glob("shard-*.bin"):
        flip_bytes_in_the_middle(shard)
    second = run_main("run", path, "--results", tmp_path / "r")
    assert second.returncode == 0, second.stderr
    assert "failed its checksum" in second.stderr
    (other,) = set(run_dirs(tmp_path / "r")) - {first}
    assert (first / "losses.csv").read_text() == (other / "losses.csv").read_text()


def test_images_edited_in_place_between_sigterm_and_resume_are_refused_by_name_unless_accepted(tmp_path):
    import signal

    from conftest import KILL_CONFIG, only_run_dir, run_cli, start_cli, wait_for_rows, wait_for_run_dir
    from PIL import Image

    images, masks = write_folder(tmp_path, 12, size=(16, 16))
    data = {"source": "folder", "images": str(images), "masks": str(masks), "image_size": [16, 16], "batch_size": 2,
            "train_size": None, "val_size": None, "val_fraction": 0.25}
    process = start_cli("run", write_yaml(tmp_path / "c.yaml", {**KILL_CONFIG, "data": data}), "--results", tmp_path / "r")
    run_dir = wait_for_run_dir(tmp_path / "r", process)
    wait_for_rows(run_dir / "losses.csv", 8, process=process)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 75, stderr
    for path in sorted(images.iterdir()):  # every image overwritten under its own name, as an editor would
        pixels = np.asarray(Image.open(path)).copy()
        Image.fromarray(255 - pixels).save(path)
    refused = run_cli("resume", run_dir)
    assert refused.returncode == 3, refused.stderr
    assert "changed since this run started" in refused.stderr and "--accept-changed-data" in refused.stderr
    assert "changed: " in refused.stderr and str(images / "ex00.png") in refused.stderr and "Traceback" not in refused.stderr
    assert json.loads((run_dir / "run.json").read_text())["status"] == "interrupted", "a refusal changes nothing"
    accepted = run_cli("resume", run_dir, "--accept-changed-data")
    assert accepted.returncode == 0, accepted.stderr
    assert "resuming on changed data as asked" in accepted.stderr
    assert only_run_dir(tmp_path / "r") == run_dir


SCAN = """
import sys
sys.path.insert(0, "tests")
import harness
from pictures import data_config, scan
config = data_config({"source": "folder", "images": sys.argv[1] + "/images", "masks": sys.argv[1] + "/masks",
                      "image_size": [64, 64], "val_fraction": 0.1, "cache": "disk"})
from pathlib import Path
scan(config, Path(sys.argv[2]))
print("scanned", flush=True)
"""


def store_files(cache):
    return {p.name: p.read_bytes() for p in sorted(cache.glob("shard-*"))}


@pytest.mark.slow
def test_a_store_write_killed_and_run_again_equals_a_store_written_in_one_go(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    from conftest import REPO

    write_folder(tmp_path, 1500, size=(64, 64))
    clean = subprocess.run([sys.executable, "-c", SCAN, str(tmp_path), str(tmp_path / "clean")], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert clean.returncode == 0, clean.stderr
    killed = 0
    for attempt in range(3):  # killed while shards are being written: a partial file or some shards done
        process = subprocess.Popen([sys.executable, "-c", SCAN, str(tmp_path), str(tmp_path / "killed")], cwd=REPO,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 300
        cache = tmp_path / "killed"
        while process.poll() is None and time.monotonic() < deadline:
            if cache.is_dir() and any(cache.glob(".*.partial")):
                process.send_signal(signal.SIGKILL)
                killed += 1
                break
            time.sleep(0.005)
        process.communicate(timeout=120)
    again = subprocess.run([sys.executable, "-c", SCAN, str(tmp_path), str(tmp_path / "killed")], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert killed >= 1, "no kill landed while a shard was being written"
    assert store_files(tmp_path / "killed") == store_files(tmp_path / "clean")
