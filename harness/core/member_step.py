"""The contract between a member's maths and the fused step's mechanics.

A member's `train_step(batch)` says WHAT one step computes: its losses, its gradients (through
`gradients`, which applies the optimizer's loss scale under mixed_float16) and its metrics, and
returns them as a `StepOutput`. The fused step says HOW: `run_member_step` pins the member to its
device, gives it a local copy of the batch, calls `train_step`, then `apply_if_finite` sums the
gradients across replicas and applies every update only if all of them are finite. A kind
written against this contract cannot forget any of that: none of it is its job.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field, replace
from typing import Any

from harness.core.backend import import_keras, import_tf
from harness.core.branches import member_branch
from harness.core.schedules import current_learning_rate

tf = import_tf()
from tensorflow.python.autograph.core import ag_ctx  # noqa: E402  (after import_tf; tf_keras's layers use it too)
LEARNING_RATE = "lr"  # every member's learning rate, a train row at every step
keras = import_keras()


@dataclass(frozen=True)
class Batch:
    """What a member's step receives: the batch (already on the member's device), the size of the
    GLOBAL batch (all replicas), and the step being computed (1-based, a tensor)."""

    images: Any
    masks: Any
    global_batch: int
    step: Any

    def mean(self, per_example):
        """Mean over the global batch of a per-example loss: summed over this replica's share and
        divided by the global batch, so replicas' sums add up to the batch mean under `mirrored`."""
        return tf.reduce_sum(per_example) / self.global_batch

    def with_masks(self, masks) -> "Batch":
        return replace(self, masks=masks)


@dataclass(frozen=True)
class Update:
    """One optimizer's share of a member's step: the loss it lowers, its gradients, its variables."""

    optimizer: Any
    gradients: list
    variables: list
    loss: Any = None


@dataclass(frozen=True)
class StepOutput:
    """What a member's step returns: metrics (each a `train` row of losses.csv) and its updates."""

    metrics: dict[str, Any]
    updates: list[Update] = field(default_factory=list)
    predictions: Any = None  # the masks it predicted, if any: scored on the common loss


def gradients(tape, loss, variables, optimizer) -> Update:
    """The update that lowers `loss`: under mixed_float16 the optimizer is a LossScaleOptimizer,
    and the gradient is taken of the scaled loss (by seeding backprop with the scale, which is
    the same as multiplying the loss inside the tape) and unscaled afterwards."""
    variables = list(variables)
    if not is_loss_scaled(optimizer):
        return Update(optimizer, tape.gradient(loss, variables), variables, loss)
    scale = tf.cast(optimizer.loss_scale, loss.dtype)
    scaled = tape.gradient(loss, variables, output_gradients=scale)
    # The loss was scaled, by seeding: tell the optimizer, whose flag only get_scaled_loss() sets
    # (it warns at every trace of apply_gradients that the loss was not scaled otherwise).
    optimizer._loss_has_been_scaled = True
    return Update(optimizer, optimizer.get_unscaled_gradients(scaled), variables, loss)


def is_loss_scaled(optimizer) -> bool:
    return isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer)


def on_device(device: str | None):
    """A member pinned by `per_model` runs (and keeps its variables) on its device."""
    return tf.device(device) if device else contextlib.nullcontext()


def run_member_step(member, images, masks, global_batch: int, step, compare_loss=None) -> dict[str, Any]:
    """One member's fragment of the fused step: pinned, local batch, maths, then apply-or-skip.
    With `compare_loss` (a per-example loss function), its predictions are also scored on the
    common loss: a few element-wise ops, outside the tape."""
    with on_device(member.device):
        if member.device:
            # The batch lives on the input pipeline's device; copying it once here makes every op of
            # the member read a local tensor, as on a single device: bitwise the same results.
            images, masks = tf.identity(images), tf.identity(masks)
        batch = Batch(images, masks, global_batch, step)
        # Before the update: the rate this step uses. Metrics are summed across replicas (each loss
        # is divided by the global batch), so each replica contributes its share of the rate.
        context = tf.distribute.get_replica_context()
        rate = current_learning_rate(member.optimizer) / float(context.num_replicas_in_sync if context else 1)
        output = graph_method(member, "train_step")(batch)
        apply_if_finite(member, output.updates, step)
        metrics = {**output.metrics, LEARNING_RATE: rate}
        if compare_loss is not None:
            predictions = output.predictions
            # A kind that returns no predictions has nothing to compare: NaN, left out of pairs.
            metrics["compare_loss"] = tf.constant(float("nan")) if predictions is None else batch.mean(compare_loss(masks, tf.cast(predictions, tf.float32)))
    return metrics


# The status tf.function's own autograph sets: what Keras and tf_convert read to decide to convert.
# (Entered as a context, it may nest: each entry pushes it once and its exit pops it once.)
_AUTOGRAPH_ON = ag_ctx.ControlStatusCtx(status=ag_ctx.Status.ENABLED)


def graph_method(member, name: str):
    """`member.<name>` (`train_step`, `eval_images`) as harness's compiled functions call it.

    harness's own side of a step is graph code as written (its branches on tensors are explicit
    tf.conds) and is traced without autograph's source rewrite, which took over a third of a
    small run's first call. From the member's method on, autograph is on again, as in any
    tf.function: a model's `call` is converted by Keras as usual, and a method that is the user's
    own (a custom kind's) is converted here, so its Python `if` and `for` over tensors work and
    its errors name its own file and line."""
    method = getattr(type(member), name)
    if method.__module__.startswith("harness."):
        bound = getattr(member, name)
    else:
        bound = functools.partial(tf.__internal__.autograph.tf_convert(method, _AUTOGRAPH_ON, convert_by_default=True), member)

    def call(*args):
        with _AUTOGRAPH_ON:
            return bound(*args)

    return call


# ---------------------------------------------------------------------------------------------
# Apply or skip


class _Opaque:
    """Carries updates through merge_call untouched: the strategy must not unwrap mirrored
    variables into per-device components, the optimizers expect them whole."""

    def __init__(self, value):
        self.value = value


def apply_if_finite(member, updates: list[Update], step) -> None:
    """Apply every update only if all losses and gradients are finite and the member is healthy;
    otherwise mark the member diverged at `step`, from then on.

    Under several replicas the gradients (and losses) are summed across them first, so every
    replica takes the same decision. A sync point inside control flow is not supported in
    replica context, so, as Keras's LossScaleOptimizer does, the cond runs in cross-replica
    context (merge_call) and re-enters the replicas to apply.
    """
    if not member.isolate_divergence:  # the user chose speed: apply as a plain loop would
        _apply(_Opaque(updates), aggregate=True)
        return
    losses = [u.loss for u in updates if u.loss is not None]
    context = tf.distribute.get_replica_context()
    replicated = context is not None and context.num_replicas_in_sync > 1
    if replicated:
        updates = [replace(u, gradients=context.all_reduce(tf.distribute.ReduceOp.SUM, u.gradients)) for u in updates]
        losses = context.all_reduce(tf.distribute.ReduceOp.SUM, losses)
    finite = all_finite(losses, [g for u in updates if not is_loss_scaled(u.optimizer) for g in u.gradients])
    healthy = tf.logical_and(finite, tf.logical_not(member.diverged))
    opaque = _Opaque(updates)
    # One replica: the guard kept one op (core/branches.py: a shorter first call, measured there).
    # Over several replicas it stays a plain, lowered cond: kept whole was not measured there.
    if not replicated:
        member_branch(member, healthy, lambda: _apply(opaque, aggregate=True), lambda: tf.constant(False))
    elif tf.__internal__.distribute.strategy_supports_no_merge_call():
        tf.cond(healthy, lambda: _apply(opaque), lambda: tf.constant(False))
    else:
        context.merge_call(_apply_cross_replica, args=(healthy, opaque))
    newly_diverged = tf.logical_and(tf.logical_not(finite), tf.logical_not(member.diverged))
    member.diverged_step.assign(tf.where(newly_diverged, tf.cast(step, tf.int64), member.diverged_step))
    member.diverged.assign(tf.logical_or(member.diverged, tf.logical_not(finite)))


def all_finite(losses: list, gradients: list):
    """True if every loss and every gradient element is finite.

    NaN and Inf propagate through a sum, so one sum per tensor and a single is_finite on their
    total decide it: about half the ops of an is_finite + reduce_all per tensor, which costs ~5% of
    a small model's step. (A total beyond float32's range, ~3e38, also counts as not finite: such
    gradients have exploded anyway.) Under float16 the loss scaler skips overflowing gradients
    itself, so the caller leaves them out.
    """
    terms = [tf.cast(loss, tf.float32) for loss in losses] + [tf.reduce_sum(tf.cast(g, tf.float32)) for g in gradients]
    return tf.math.is_finite(tf.add_n(terms))


def _apply(updates: _Opaque, aggregate: bool = False):
    for u in updates.value:
        pairs = list(zip(u.gradients, u.variables))
        if aggregate:
            u.optimizer.apply_gradients(pairs)
        else:  # already summed across replicas in apply_if_finite
            u.optimizer.apply_gradients(pairs, skip_gradients_aggregation=True)
    return tf.constant(True)


def _apply_cross_replica(distribution, healthy, updates):
    decision = distribution.experimental_local_results(healthy)[0]

    def apply():
        distribution.extended.call_for_each_replica(_apply, args=(updates,))
        return tf.constant(True)

    tf.cond(decision, apply, lambda: tf.constant(False))
