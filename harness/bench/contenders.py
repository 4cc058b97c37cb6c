"""The contenders a bench section times: the harness's fused step in its forms, the hand-written
multi-tape loop it replaces, model.fit one model after another, and the input pipelines."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable


from harness.core.backend import import_tf
from harness.config.schema import ExperimentConfig

tf = import_tf()



@dataclass
class Contender:
    name: str
    call: Callable[[int], None]  # run n steps and wait for them to finish
    trace_s: float


# ---------------------------------------------------------------------------------------------
# Contenders


def _members(config: ExperimentConfig, placement=None):
    from harness.members.registry import build_members
    from harness.core.placement import build_placement

    placement = placement or build_placement(config)
    with placement.strategy.scope():
        members = build_members(config, placement.model_devices)
        step = tf.Variable(0, dtype=tf.int64)
    return placement, members, step


def one_device_strategy_placement():
    """one_device on the CPU as it was before single-replica placements bypassed the strategy:
    through tf.distribute.OneDeviceStrategy's iterator and strategy.run."""
    from harness.core.placement import Placement

    return Placement(tf.distribute.OneDeviceStrategy("/cpu:0"), plan={"strategy": "one_device"})


def _endless_batches(config: ExperimentConfig, expensive: bool = False, scan=None):
    """The train pipeline of `config` (a real source's needs its scan), practically endless: plain
    (images, masks) batches of its first training seed, as a hand-written loop takes them."""
    from harness.data.pipeline import build_datasets

    dataset = build_datasets(config.data, config.training_seeds()[:1], 0, 10**9, scan).train.map(lambda stream: stream)
    return expensive_pipeline(dataset) if expensive else dataset


def _one_stream(dataset):
    """Plain batches as the fused step takes them: a tuple of one stream."""
    return dataset.map(lambda images, masks: ((images, masks),))


def make_fused_contender(config: ExperimentConfig, name: str, steps_per_call: int = 1, expensive: bool = False, graph_loop: bool = False, placement=None,
                         switched: bool = False) -> Contender:
    """The harness's own fused loop, `steps_per_call` steps per compiled call; `graph_loop`: at one
    step per call, use the graph-loop form anyway (what a run compiled for k > 1 does for a 1-step
    call); `placement`: instead of the config's; `switched`: a switch per member, all on, as a run
    on one replica builds its step (a race drops members by them, the probes time each alone)."""
    placement, loop = _fused_loop(config, steps_per_call, graph_loop, placement, switched)
    return _fed(name, loop, placement.input_iterator(_one_stream(_endless_batches(config, expensive))), steps_per_call)


def make_input_contenders(config: ExperimentConfig, steps_per_call: int, expensive: bool = False, scan=None) -> tuple[Contender, Contender]:
    """One fused loop fed two ways: by the real pipeline ("real") and by a few of its batches held
    in memory ("in_memory"). The same models and the same compiled function: two separately built
    model sets differ in speed by a few % on their own, which would be read as input cost."""
    placement, loop = _fused_loop(config, steps_per_call)
    batches = _one_stream(_endless_batches(config, expensive, scan))
    return (
        _fed("real", loop, placement.input_iterator(batches), steps_per_call),
        _fed("in_memory", loop, placement.input_iterator(_held(batches)), steps_per_call),
    )


def _fused_loop(config: ExperimentConfig, steps_per_call: int, graph_loop: bool = False, placement=None, switched: bool = False):
    from harness.core.step import make_switches, make_train_loop

    placement, members, step = _members(config, placement)
    compiled_for = max(steps_per_call, 2) if graph_loop else steps_per_call
    switches = make_switches(members, placement.strategy) if switched else None
    return placement, make_train_loop(members, placement, step, config.data.batch_size, compiled_for, switches=switches)


def _held(batches):
    return batches.take(4).cache().repeat()


def _fed(name: str, loop, iterator, steps_per_call: int) -> Contender:
    """A contender calling `loop` on `iterator`; its first call (the trace, or filling a cache) is timed apart."""

    def call(n: int) -> None:
        # n steps exactly, as the timing divides by n: whole calls of steps_per_call, then one
        # call of the rest (the same compiled loop, fewer trips). `--steps 2` used to run a
        # ten-step contender for 10 steps and divide by 2.
        whole, rest = divmod(n, steps_per_call)
        for chunk in [steps_per_call] * whole + ([rest] if rest else []):
            tf.nest.map_structure(lambda t: t.numpy(), loop(iterator, chunk))

    began = time.perf_counter()
    call(steps_per_call)
    return Contender(name, call, time.perf_counter() - began)


def seed003_step(member, images, masks):
    """One model's step as a hand-written multi-tape loop writes it: a tape, the mean loss, apply_gradients."""
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(member.loss_fn(masks, member.model(images, training=True)))
    gradients = tape.gradient(loss, member.model.trainable_variables)
    member.optimizer.apply_gradients(zip(gradients, member.model.trainable_variables))
    return loss


def make_hand_loop_contender(config: ExperimentConfig, name: str = "hand_loop") -> Contender:
    """Seed 003's script: one tf.function, a GradientTape and an optimizer per model, a batch fed
    per call from Python, every loss read back each step (it prints them)."""
    _, members, _ = _members(config)
    iterator = iter(_endless_batches(config))

    @tf.function
    def train(images, masks):
        return [seed003_step(m, images, masks) for m in members]

    def call(n: int) -> None:
        for _ in range(n):
            images, masks = next(iterator)
            [float(v) for v in train(images, masks)]

    began = time.perf_counter()
    call(1)
    return Contender(name, call, time.perf_counter() - began)


def make_variant_contender(config: ExperimentConfig, name: str, fragment: str) -> Contender:
    """One step per call, the batch taken inside the compiled function, members called directly:
    `fragment` is "hand" (a hand-written tape + apply_gradients) or "member" (the harness's member
    step: loss over the global batch, finiteness check, skip-if-not-finite, diverged flags)."""
    from harness.core.step import member_fragment

    _, members, step = _members(config)
    iterator = iter(_endless_batches(config))

    def member_step(member, images, masks):
        if fragment == "hand":
            return {"loss": seed003_step(member, images, masks)}
        return member_fragment(member, config.data.batch_size, jit_compile=False)(images, masks, step + 1)

    @tf.function
    def one(iterator):
        images, masks = next(iterator)
        return {m.name: member_step(m, images, masks) for m in members}

    def call(n: int) -> None:
        for _ in range(n):
            tf.nest.map_structure(lambda t: t.numpy(), one(iterator))

    began = time.perf_counter()
    call(1)
    return Contender(name, call, time.perf_counter() - began)


def fit_one_after_another(config: ExperimentConfig, steps: int, expensive: bool = False) -> dict[str, float]:
    """Each model compiled and trained alone with model.fit, one after another, each with its own
    pass over the input pipeline. Returns end-to-end seconds (building and tracing included, as
    for the harness) and steady ms/step."""
    began = time.perf_counter()
    _, members, _ = _members(config)
    total = time.perf_counter() - began
    steady_ms = 0.0
    for member in members:
        dataset = _endless_batches(config, expensive)
        member.model.compile(optimizer=member.optimizer, loss=lambda y, p, f=member.loss_fn: f(y, p))
        began = time.perf_counter()
        member.model.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0)
        total += time.perf_counter() - began
        began = time.perf_counter()
        member.model.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0)  # traced already
        steady_ms += 1000 * (time.perf_counter() - began) / steps
    return {"end_to_end_s": total, "ms_per_step": steady_ms}


def fused_end_to_end(config: ExperimentConfig, steps: int, expensive: bool = False) -> dict[str, float]:
    """The harness as a run uses it: all models built, one trace, `train.steps_per_call` steps per
    call. Returns end-to-end seconds and steady ms/step, as fit_one_after_another."""
    began = time.perf_counter()
    k = min(config.train.steps_per_call, steps)
    contender = make_fused_contender(config, "fused", k, expensive)  # builds, traces, runs k steps
    if steps > k:
        contender.call(steps - k)
    total = time.perf_counter() - began
    began = time.perf_counter()
    contender.call(steps)
    return {"end_to_end_s": total, "ms_per_step": 1000 * (time.perf_counter() - began) / steps, "trace_s": contender.trace_s}


def expensive_pipeline(dataset, scale: int = 4):
    """What a real pipeline costs: source images larger than the training size (here `scale` x per
    side), PNG-decoded, resized down and augmented (flip, rotation, brightness/contrast), per
    example, on the host, one example at a time."""

    def per_example(image, mask):
        height, width, channels = image.shape
        big = tf.image.resize(image, [height * scale, width * scale])
        encoded = tf.io.encode_png(tf.cast(tf.clip_by_value(big, 0.0, 1.0) * 255.0, tf.uint8))  # the file on disk
        decoded = tf.cast(tf.io.decode_png(encoded, channels=channels), tf.float32) / 255.0
        decoded = tf.image.resize(decoded, [height, width], antialias=True)
        decoded = tf.image.adjust_contrast(tf.image.adjust_brightness(decoded, 0.05), 1.1)
        both = tf.image.rot90(tf.image.flip_left_right(tf.concat([decoded, mask], axis=-1)), k=1)
        return both[..., :channels], both[..., channels:]

    def per_batch(images, masks):
        return tf.map_fn(lambda pair: per_example(*pair), (images, masks), fn_output_signature=(images.dtype, masks.dtype))

    return dataset.map(per_batch, num_parallel_calls=1)


def pipeline_ms_per_batch(config: ExperimentConfig, batches: int, expensive: bool) -> float:
    iterator = iter(_endless_batches(config, expensive))
    next(iterator)
    began = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return 1000 * (time.perf_counter() - began) / batches


