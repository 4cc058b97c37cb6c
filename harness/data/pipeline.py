"""One input pipeline for all models: each batch is made once and fed to every member.

The train pipeline is a pure function of the step number: the batch for step s is drawn from a
per-epoch permutation seeded by (training seed, epoch). Resuming at step s therefore needs no
iterator state, only s, and every run with the same seed sees the same batches in the same order.

With `train.repeats: R` there are R input streams, one per repeat's training seed: each element
of the train dataset is a tuple of R batches, and repeat r of every model is fed stream r. Within
a repeat every model sees the same batches (the comparison stays paired); across repeats the data
order and the augmentation draws differ, as they would between separate runs. One repeat: a tuple
of one batch.

The data themselves never depend on the training seed: the synthetic shapes task (circles,
rectangles and diamonds over textured noise, with exact masks) is generated from (`data.seed`,
example index) by native TensorFlow ops, and real sources split by a hash of each file's stem.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from harness.core.backend import import_tf
from harness.data.augment import make_augment_fn
from harness.config.data_spec import IGNORED_LABEL
from harness.config.schema import DataSpec

tf = import_tf()

SHAPE_KINDS = ("circle", "rectangle", "diamond")

# Every function this module maps over a dataset is graph code as written (its Python `if`s and
# `for`s run on Python values while tracing), so tf.data traces it without autograph's source
# rewrite, as the train step is (core/step.py): the same graph, without the rewrite's cost (0.5 s
# of building smoke's pipelines). A function called from one of them is not rewritten either.
graph_code = tf.autograph.experimental.do_not_convert


@dataclass(frozen=True)
class Datasets:
    """The train pipeline starting at some step (a tuple of batches per step, one per training
    seed), and the fixed validation set."""

    train: "tf.data.Dataset"
    val: "tf.data.Dataset"
    steps_per_epoch: int
    test: "tf.data.Dataset | None" = None  # the held-out test split, scored once at the end


def build_datasets(spec: DataSpec, seeds: tuple[int, ...], start_step: int, total_steps: int, scan=None) -> Datasets:
    """The train pipeline from `start_step`, one stream per training seed in `seeds`, and the
    validation set, for a resolved spec; a real source needs its scan
    (`harness.data.resolve.resolve_data`)."""
    if spec.source == "synthetic":
        make_example = make_synthetic_example_fn(spec, spec.seed)
    elif scan is None:
        raise RuntimeError(f"data.source {spec.source}: build_datasets needs the scan from harness.data.resolve.resolve_data")
    elif scan.store is not None:
        make_example = make_store_example_fn(scan.store, spec.classes, spec.ignore_label is not None)
    else:
        make_example = make_array_example_fn(scan, spec.classes, spec.ignore_label is not None)
    augment = make_augment_fn(spec.augment, spec.image_size)
    streams = tuple(make_train_dataset(make_example, spec, seed, start_step, total_steps, augment) for seed in seeds)
    return Datasets(
        train=tf.data.Dataset.zip(streams),  # each stream prefetches on its own
        val=make_val_dataset(make_example, spec, in_memory=scan is None or scan.store is None),
        steps_per_epoch=spec.steps_per_epoch,
        test=make_test_dataset(make_example, spec) if spec.has_test else None,
    )


def make_train_dataset(make_example, spec: DataSpec, seed: int, start_step: int, total_steps: int, augment=None):
    """Batches for steps start_step .. total_steps-1 (0-based), each exactly `batch_size` examples;
    example j of step s is augmented with the key (seed, s * batch + j)."""
    n, batch = spec.train_size, spec.batch_size
    steps_per_epoch = spec.steps_per_epoch
    sample = bootstrap_sample(n, seed) if spec.bootstrap_train else None

    @graph_code
    def indices_for_step(step):
        epoch = step // steps_per_epoch
        position = step % steps_per_epoch
        order = tf.argsort(tf.random.stateless_uniform([n], seed=tf.stack([tf.cast(seed, tf.int64), epoch])))
        chosen = order[position * batch : (position + 1) * batch]
        if sample is not None:  # the epoch's order runs over the seed's sample instead of over 0..n-1
            chosen = tf.cast(tf.gather(sample, chosen), chosen.dtype)
        return chosen, step * batch + tf.range(batch, dtype=tf.int64)

    @graph_code
    def example(index, draw):
        image, mask = make_example(index)
        if augment is None:
            return image, mask
        return augment(image, mask, tf.stack([tf.cast(seed, tf.int64) + 1_000_003, draw]))

    return (
        tf.data.Dataset.range(start_step, total_steps)
        .map(indices_for_step)
        .unbatch()
        .map(example, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .batch(batch, drop_remainder=True)
        .prefetch(tf.data.AUTOTUNE)
    )


# An autotuned tf.data iterator's destructor joins its tuning thread, which ends its current sleep
# first: seconds, at whatever point that sleep had reached. Two remedies, by what the iterator is for:
# a probe's iterators need no tuning (`without_autotuning`); the training pipeline's speed needs it,
# so its iterator is dropped off the run's thread (`let_go_of`).


def without_autotuning(dataset):
    """`dataset` with tf.data's autotuning off: an iterator over it starts no tuning thread, so
    dropping it does not wait for one."""
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)


def let_go_of(holder: list) -> threading.Thread:
    """Empty `holder`, which holds the last reference to a tf.data iterator, on a thread of its own.

    Dropping smoke's training iterator kept the run idle for 2.0-2.1 s (2 ms of CPU), now and then
    (4 of 15 traced runs, 1 of 8 in a side-by-side A/B), in `RootDataset::Iterator::~Iterator`.
    TensorFlow lets go of the GIL while it waits, so the run goes on at full speed meanwhile; the
    thread is a daemon, so a process that leaves (harness.leaving) does not wait for it either."""
    dropping = threading.Thread(target=holder.clear, name="harness-drop-iterator", daemon=True)
    dropping.start()
    return dropping


BOOTSTRAP_STREAM = 2_000_003  # apart from the data order's (seed, epoch) and augmentation's (seed + 1_000_003, draw)


def bootstrap_sample(n: int, seed: int):
    """The training examples a seed trains on with `data.bootstrap_train`: n draws from 0..n-1 with
    replacement (about 63% of the examples, some more than once), the same for every epoch and
    after a resume: a function of the seed alone."""
    return tf.random.stateless_uniform([n], seed=tf.constant([seed + BOOTSTRAP_STREAM, 0], tf.int64), minval=0, maxval=n, dtype=tf.int64)


def make_array_example_fn(scan, classes: int, ignore: bool = False):
    """f(index) for scanned real data: train examples first, then validation ones. The arrays sit
    in CPU variables, which the input functions capture by reference, not as graph constants."""
    if scan.variables is None:  # once per scan: the run, the probes and the samples share them
        with tf.device("/cpu:0"):
            scan.variables = (
                tf.Variable(scan.images, trainable=False, name="data_images"),
                tf.Variable(scan.labels, trainable=False, name="data_labels"),
            )
    images, labels = scan.variables
    scale = 255.0 if scan.images.dtype.name == "uint8" else 1.0

    def make_example(index):
        image = tf.cast(tf.gather(images, index), tf.float32) / scale
        label = tf.cast(tf.gather(labels, index), tf.int32)
        return image, _encode_mask(label, classes, ignore)

    return make_example


def make_store_example_fn(store, classes: int, ignore: bool = False):
    """f(index) for `data.cache: disk`: one positional read from the on-disk store per example (in
    tf.data's parallel map), then the same ops as the in-memory path: the same values, bit for bit."""
    shape = store.shape
    dtype = tf.uint8 if shape.image_dtype == "uint8" else tf.float32
    scale = 255.0 if shape.image_dtype == "uint8" else 1.0

    def make_example(index):
        image, label = tf.numpy_function(store.read, [index], [dtype, tf.uint8], stateful=False)
        image = tf.ensure_shape(image, shape.image)
        label = tf.ensure_shape(label, shape.labels)
        return tf.cast(image, tf.float32) / scale, _encode_mask(tf.cast(label, tf.int32), classes, ignore)

    return make_example


def make_val_dataset(make_example, spec: DataSpec, in_memory: bool = True):
    """Examples after the training ones (indices train_size ..), so the two never overlap. Kept in
    memory after the first pass, unless the data streams from disk (memory must not grow with it)."""
    first = spec.train_size
    dataset = tf.data.Dataset.range(first, first + spec.val_size).map(graph_code(make_example), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).batch(spec.batch_size)
    return (dataset.cache() if in_memory else dataset).prefetch(tf.data.AUTOTUNE)


def make_test_dataset(make_example, spec: DataSpec):
    """Examples after the validation ones: read once, at the end of a run, so not cached."""
    first = spec.train_size + spec.val_size
    return tf.data.Dataset.range(first, first + spec.test_size).map(graph_code(make_example), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).batch(spec.batch_size)


def make_synthetic_example_fn(spec: DataSpec, seed: int):
    """Return f(index) -> (image [H,W,C] float32 in [0,1], mask [H,W,classes] float32)."""
    height, width = spec.image_size
    channels, classes, slots = spec.channels, spec.classes, spec.max_shapes
    ys = tf.range(height, dtype=tf.float32)[None, :, None]
    xs = tf.range(width, dtype=tf.float32)[None, None, :]
    side = float(min(height, width))

    def make_example(index):
        key = tf.stack([tf.cast(seed, tf.int64), tf.cast(index, tf.int64)])

        def uniform(shape, salt, low=0.0, high=1.0):
            return tf.random.stateless_uniform(shape, seed=key + [0, salt * 1_000_003], minval=low, maxval=high)

        coarse = uniform([max(height // 8, 1), max(width // 8, 1), channels], 1)
        texture = tf.image.resize(coarse, [height, width], method="bilinear")
        texture = 0.25 + 0.35 * texture + 0.15 * uniform([height, width, channels], 2)

        count = tf.cast(tf.floor(uniform([], 3, 1.0, slots + 1.0)), tf.int32)
        active = tf.range(slots) < count
        kind = tf.cast(tf.floor(uniform([slots], 4, 0.0, len(SHAPE_KINDS))), tf.int32)
        cy = uniform([slots], 5, 0.15, 0.85)[:, None, None] * height
        cx = uniform([slots], 6, 0.15, 0.85)[:, None, None] * width
        ry = uniform([slots], 7, 0.08, 0.22)[:, None, None] * side
        rx = uniform([slots], 8, 0.08, 0.22)[:, None, None] * side
        dy, dx = (ys - cy) / ry, (xs - cx) / rx
        inside = tf.stack(
            [dy**2 + dx**2 <= 1.0, (tf.abs(dy) <= 1.0) & (tf.abs(dx) <= 1.0), tf.abs(dy) + tf.abs(dx) <= 1.0],
            axis=1,
        )  # [slots, kinds, H, W]
        masks = tf.gather(inside, kind, axis=1, batch_dims=1) & active[:, None, None]
        colours = uniform([slots, channels], 9, 0.0, 1.0)

        image, label = texture, tf.zeros([height, width], tf.int32)
        for s in range(slots):  # later shapes are drawn over earlier ones, in image and label alike
            m = masks[s]
            image = tf.where(m[:, :, None], 0.7 * colours[s] + 0.3 * texture, image)
            label = tf.where(m, _class_of(kind[s], classes), label)
        return tf.clip_by_value(image, 0.0, 1.0), _encode_mask(label, classes)

    return make_example


def _class_of(kind, classes: int):
    """Binary task: every shape is foreground. Multi-class: class 1.. by shape kind."""
    if classes == 1:
        return tf.constant(1, tf.int32)
    return kind % (classes - 1) + 1


def _encode_mask(label, classes: int, ignore: bool = False):
    """Class ids as the members' targets: one channel of 0/1, or one-hot. With `data.ignore_label`
    (`ignore`), a pixel stored as IGNORED_LABEL is no class: -1 in one channel, all zeros one-hot
    (tf.one_hot gives zeros for an id past its depth), which the losses and counts leave out."""
    if classes == 1:
        target = tf.cast(label > 0, tf.float32)
        return (tf.where(label == IGNORED_LABEL, -1.0, target) if ignore else target)[:, :, None]
    return tf.one_hot(label, classes, dtype=tf.float32)
