"""`data.bootstrap_train`: each training seed trains on its own bootstrap sample of the training
split, the same in every epoch and after a resume, so repeats vary the data sampled too; the
intervals say that they cover it."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import tensorflow as tf
from conftest import tiny_config

from harness.config.loading import validate_config
from harness.data.pipeline import bootstrap_sample, build_datasets, make_train_dataset
from harness.outputs.uncertainty import interval_covers
from harness.rundir import read_csv


def spec(bootstrap: bool, train_size: int = 32):
    return validate_config(tiny_config(data={"train_size": train_size, "bootstrap_train": bootstrap})).data


def the_index(index):
    """A fake example whose image is its own index: the batches show which examples a step drew."""
    return tf.fill([1], tf.cast(index, tf.float32)), tf.zeros([1])


def indices_by_epoch(data, seed: int, epochs: int, start_step: int = 0) -> list[list[int]]:
    steps = data.steps_per_epoch
    stream = make_train_dataset(the_index, data, seed, start_step, epochs * steps)
    flat = [int(v) for images, _ in stream for v in images.numpy().ravel()]
    return [flat[e * steps * data.batch_size:(e + 1) * steps * data.batch_size] for e in range(len(flat) // (steps * data.batch_size))]


def test_without_it_every_epoch_visits_each_training_example_once():
    for epoch in indices_by_epoch(spec(False), seed=3, epochs=2):
        assert sorted(epoch) == list(range(32))


def test_each_epoch_runs_over_the_seeds_own_sample_drawn_with_replacement():
    data = spec(True)
    first, second = indices_by_epoch(data, seed=3, epochs=2)
    sample = Counter(bootstrap_sample(32, 3).numpy().tolist())
    assert Counter(first) == Counter(second) == sample and first != second  # the same sample, a new order
    assert max(sample.values()) > 1 and len(sample) < 32  # some examples twice, some not at all
    assert Counter(indices_by_epoch(data, seed=4, epochs=1)[0]) != sample  # another seed, another sample


def test_a_resumed_stream_draws_what_the_whole_one_drew():
    data = spec(True)
    whole = make_train_dataset(the_index, data, 3, 0, 8)
    resumed = make_train_dataset(the_index, data, 3, 5, 8)
    tail = [images.numpy() for images, _ in whole][5:]
    np.testing.assert_array_equal(np.stack(tail), np.stack([images.numpy() for images, _ in resumed]))


def test_repeat_r_is_fed_what_a_one_repeat_run_with_that_seed_is_fed():
    data = spec(True)
    both = build_datasets(data, (3, 4), 0, 8).train
    alone = build_datasets(data, (4,), 0, 8).train
    for (_, (images_4, masks_4)), ((images, masks),) in zip(both, alone):
        np.testing.assert_array_equal(images_4.numpy(), images.numpy())
        np.testing.assert_array_equal(masks_4.numpy(), masks.numpy())


def test_the_intervals_say_they_cover_the_bootstraps_with_repeats_only():
    config = validate_config(tiny_config(data={"bootstrap_train": True}, train={"repeats": 3}))
    assert interval_covers(config, config.ranking_column()) == "training seeds, training-set bootstraps and validation images"
    one_seed = validate_config(tiny_config(data={"bootstrap_train": True}))
    assert interval_covers(one_seed, one_seed.ranking_column()).startswith("validation images only")


def test_a_bootstrap_with_one_training_seed_is_warned_of():
    from harness.rundir import RunRecord
    from harness.training.actions import data_warnings

    record = RunRecord(name="tiny", run_id="r")  # its scan found no copies across splits
    one_seed = validate_config(tiny_config(data={"bootstrap_train": True}))
    assert any("data.bootstrap_train with train.repeats 1" in w for w in data_warnings(one_seed, record))
    assert not [w for w in data_warnings(validate_config(tiny_config(data={"bootstrap_train": True}, train={"repeats": 3})), record) if "bootstrap_train" in w]


@pytest.mark.slow
def test_a_run_with_repeats_on_bootstraps_writes_what_its_intervals_cover(tmp_path):
    from harness.api import run

    config = validate_config(tiny_config(data={"bootstrap_train": True}, train={"repeats": 2, "epochs": 1}))
    result = run(config, results_dir=tmp_path)
    covers = "training seeds, training-set bootstraps and validation images"
    assert (result.summary["interval_covers"] == covers).all()
    pairs = read_csv(result.run_dir / "pairs.csv")
    assert (pairs.dropna(subset=["diff"])["covers"] == covers).all()
    assert "training-set bootstraps" in (result.run_dir / "report.html").read_text()
    assert [w for w in result.info["warnings"] if w.startswith("train.repeats 2: ")]  # said again at the end
