"""Datasets larger than memory (`data.cache: disk`): the on-disk store of decoded examples, reused
shard by shard; a streamed run equal bit for bit to the same run held in memory; memory that does
not grow with the dataset; a full disk that leaves nothing half-written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import REPO, assert_same_training, only_run_dir, run_cli, start_cli, tiny_config, wait_for_rows, wait_for_run_dir, write_yaml
from PIL import Image
from pictures import data_config, scan, write_folder, write_tfds

from harness.data import store as store_module
from harness.data.store import SHARD_MEAN, shard_boundaries
from harness.errors import ResourceError


def test_one_more_item_moves_only_its_own_shard():
    names = [f"img{i:05d}" for i in range(5000)]
    before = {tuple(names[a:b]) for a, b in shard_boundaries(names)}
    grown = names[:2500] + ["img02500-new"] + names[2500:]
    after = {tuple(grown[a:b]) for a, b in shard_boundaries(grown)}
    assert len(before - after) == 1 and len(after - before) == 1  # one shard rebuilt, the rest reused
    assert 5000 / len(before) == pytest.approx(SHARD_MEAN, rel=0.5)


def folder_config(root, count, **data):
    images, masks = write_folder(root, count, size=(16, 16))
    return {"source": "folder", "images": str(images), "masks": str(masks), "val_fraction": 0.25, **data}


def test_changed_and_half_written_shards_are_rebuilt_the_rest_reused(tmp_path):
    config = data_config(folder_config(tmp_path, 40, cache="disk"))
    cache = tmp_path / "cache"
    first = scan(config, cache)
    assert first.facts["cache"]["decoded"] == 40
    shards = sorted(cache.glob("shard-*.bin"))
    # a kill mid-write leaves a temporary file (never read) or a .bin without its .json
    (cache / ".shard-x.bin.1.1.partial").write_bytes(b"half")
    victim = shards[0]
    victim.with_suffix(".json").unlink()
    again = scan(config, cache)
    assert again.facts["cache"]["decoded"] == len(json.loads(first_json(first, victim))["items"]) < 40
    image = Image.open(tmp_path / "images" / "ex03.png")  # one file changes: only its shard is decoded again
    image.save(tmp_path / "images" / "ex03.png")
    third = scan(config, cache)
    assert 0 < third.facts["cache"]["decoded"] < 40
    for i in range(third.train_size + third.val_size):
        np.testing.assert_array_equal(third.store.read(i)[0], first.store.read(i)[0])


def test_shards_unused_for_two_weeks_and_old_leftovers_of_killed_writes_are_removed(tmp_path):
    cache = tmp_path / "cache"
    old, recent, tonight = (data_config(folder_config(tmp_path / name, 12, cache="disk")) for name in ("old", "recent", "tonight"))
    stale = scan(old, cache).store.shards
    kept = scan(recent, cache).store.shards  # another setting's shards, used recently: kept
    two_weeks_ago, two_days_ago = time.time() - store_module.UNUSED_FOR_S - 60, time.time() - 2 * 86400
    for shard in stale:
        os.utime(cache / f"shard-{shard.key}.json", (two_weeks_ago, two_weeks_ago))
    leftovers = [cache / ".shard-a.bin.7.7.partial", cache / "shard-killedbeforeitsjson.bin"]
    for path in leftovers:
        path.write_bytes(b"x" * 100)
        os.utime(path, (two_days_ago, two_days_ago))
    live_write = cache / ".shard-b.bin.8.8.partial"  # another process writing right now
    live_write.write_bytes(b"y")
    stale_bytes = sum((cache / f"shard-{s.key}{ext}").stat().st_size for s in stale for ext in (".json", ".bin"))

    facts = scan(tonight, cache).facts["cache"]
    assert facts["pruned_files"] == 2 * len(stale) + 2 and facts["freed_bytes"] == stale_bytes + 200
    left = {path.name for path in cache.iterdir()}
    assert not any(s.key in name for s in stale for name in left) and not any(p.name in left for p in leftovers)
    assert all(f"shard-{s.key}.{ext}" in left for s in kept for ext in ("json", "bin")) and live_write.name in left

    # a shard in use is marked each time it is used, however old it was
    for shard in kept:
        os.utime(cache / f"shard-{shard.key}.json", (two_weeks_ago, two_weeks_ago))
    again = scan(recent, cache)
    assert again.facts["cache"]["decoded"] == 0 and again.facts["cache"]["pruned_files"] == 0
    assert all(time.time() - (cache / f"shard-{s.key}.json").stat().st_mtime < 3600 for s in kept)


def first_json(result, bin_path) -> str:
    key = bin_path.stem.removeprefix("shard-")
    (shard,) = [s for s in result.store.shards if s.key == key]
    return json.dumps(shard.info)


def test_a_full_disk_exits_4_naming_the_path_and_leaves_no_half_shard(tmp_path, monkeypatch):
    config = data_config(folder_config(tmp_path, 12, cache="disk"))

    class Full:
        def write(self, data):
            raise OSError(28, "No space left on device")

        def close(self):
            pass

    real_enter = store_module._atomic.__enter__

    def enter(self):
        real_enter(self).close()
        self.handle = Full()
        return self.handle

    monkeypatch.setattr(store_module._atomic, "__enter__", enter)
    with pytest.raises(ResourceError) as raised:
        scan(config, tmp_path / "cache")
    assert raised.value.exit_code == 4 and "no space left writing" in raised.value.render() and str(tmp_path / "cache") in raised.value.render()
    assert not list((tmp_path / "cache").iterdir())  # no shard, no temporary file


def test_a_streamed_run_killed_and_resumed_equals_the_run_held_in_memory_bit_for_bit(tmp_path):
    data = folder_config(tmp_path / "data", 48, image_size=[16, 16], batch_size=4, train_size=None, val_size=None)
    train = {"epochs": 2, "steps_per_call": 1, "deterministic": True}
    memory = tiny_config(data={**data, "cache": "memory"}, train=train)
    done = run_cli("run", write_yaml(tmp_path / "memory.yaml", memory), "--results", tmp_path / "memory")
    assert done.returncode == 0, done.stderr
    streamed = tiny_config(data={**data, "cache": "disk"}, train=train, output={"probe_steps": 0, "progress": "lines"})
    process = start_cli("run", write_yaml(tmp_path / "disk.yaml", streamed), "--results", tmp_path / "disk")
    disk_run = wait_for_run_dir(tmp_path / "disk", process)
    assert wait_for_rows(disk_run / "losses.csv", 3 * 2 * 6, process=process), "finished before it could be stopped"
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=120)
    assert process.returncode == 75
    done = run_cli("resume", disk_run)
    assert done.returncode == 0, done.stderr
    info = json.loads((disk_run / "run.json").read_text())
    assert info["resumes"] and info["data"]["cache"]["decoded"] == 0  # the resume read the store the run wrote
    assert_same_training(disk_run, only_run_dir(tmp_path / "memory"))


PEAK = """
import json, resource, subprocess, sys
done = subprocess.run([sys.executable, "-m", "harness", "run", sys.argv[1], "--results", sys.argv[2]], capture_output=True, text=True)
print(json.dumps({"code": done.returncode, "stderr": done.stderr[-3000:], "peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""


@pytest.mark.slow
def test_ten_times_the_images_take_less_than_10_percent_more_memory_when_streamed(tmp_path):
    # The same steps (40 of 8) for both, so tf.data's autotuned buffers grow alike: only the dataset
    # differs. The scan decodes and stores every image; held in memory, the extra 2,700 would add
    # about 190 MB (their arrays and the tf.Variable copy): 22% of the ~860 MB peak.
    peaks = {}
    for count in (300, 3000):
        root = tmp_path / str(count)
        (root / "images").mkdir(parents=True)
        (root / "masks").mkdir()
        rng = np.random.default_rng(count)
        for i in range(count):  # noise compresses badly: the files are as large as real photographs'
            Image.fromarray(rng.integers(0, 256, (96, 96, 3), dtype=np.uint8)).save(root / "images" / f"{i:05d}.png", compress_level=1)
            Image.fromarray((rng.random((96, 96)) > 0.5).astype(np.uint8) * 255).save(root / "masks" / f"{i:05d}.png", compress_level=1)
        data = {"source": "folder", "images": str(root / "images"), "masks": str(root / "masks"), "image_size": [96, 96],
                "batch_size": 8, "train_size": None, "val_size": None, "val_fraction": 0.1, "cache": "disk"}
        config = tiny_config(data=data, models=[{"name": "fcn", "arch": "tiny_fcn"}], train={"steps": 40, "steps_per_call": 10},
                             output={"probe_steps": 0, "progress": "none", "export": False})
        done = subprocess.run([sys.executable, "-c", PEAK, str(write_yaml(root / "c.yaml", config)), str(root / "r")], cwd=REPO, capture_output=True, text=True, timeout=900)
        outcome = json.loads(done.stdout)
        assert outcome["code"] == 0, outcome["stderr"]
        peaks[count] = outcome["peak_mb"]
    assert peaks[3000] < 1.10 * peaks[300], peaks


def source_configs(root) -> dict[str, dict]:
    """One config of each source over the same kind of pictures (a bad file in the folder one)."""
    import csv as csv_module

    images, masks = write_folder(root / "folder", 10, size=(16, 16))
    (images / "ex99.png").write_bytes(b"not a png")  # its mask is missing too: two problems, caught alike
    with (root / "pairs.csv").open("w", newline="") as handle:
        writer = csv_module.writer(handle)
        writer.writerow(["image", "mask", "split"])
        for i in range(10):
            writer.writerow([f"folder/images/ex{i:02d}.png", f"folder/masks/ex{i:02d}.png", "val" if i >= 8 else "train"])
    rng = np.random.default_rng(1)
    np.save(root / "x.npy", rng.uniform(0, 1, (10, 16, 16, 3)).astype(np.float32))  # float images stream as floats
    np.save(root / "y.npy", (rng.uniform(0, 1, (10, 16, 16)) > 0.5).astype(np.uint8))
    return {
        "folder": {"source": "folder", "images": str(images), "masks": str(masks), "val_fraction": 0.3, "on_bad_data": "skip"},
        "csv": {"source": "csv", "manifest": str(root / "pairs.csv")},
        "arrays": {"source": "arrays", "images": str(root / "x.npy"), "masks": str(root / "y.npy")},
        "tfds": {"source": "tfds", "tfds": {"name": "shapes_seg", "data_dir": str(write_tfds(root / "tfds"))}},
    }


def test_every_source_streams_the_examples_it_holds_in_memory(tmp_path):
    for name, data in source_configs(tmp_path).items():
        held = scan(data_config({**data, "cache": "memory"}))
        streamed = scan(data_config({**data, "cache": "disk"}), tmp_path / "cache" / name)
        assert (streamed.train_size, streamed.val_size) == (held.train_size, held.val_size), name
        assert streamed.facts["problems"] == held.facts["problems"], name  # the catalogue of bad files is unchanged
        for i in range(held.train_size + held.val_size):
            image, labels = streamed.store.read(i)
            np.testing.assert_array_equal(image, held.images[i], err_msg=f"{name} example {i}")
            np.testing.assert_array_equal(labels, held.labels[i], err_msg=f"{name} example {i}")
