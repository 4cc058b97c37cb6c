"""The member/step contract with a tiny Keras model: gradients through a loss scale, the batch
mean over the global batch, apply-or-skip."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from harness.core.backend import import_keras, import_tf
from harness.core.branches import member_branch
from harness.core.member_step import Batch, apply_if_finite, gradients, is_loss_scaled

tf = import_tf()
keras = import_keras()


def tiny_model():
    keras.utils.set_random_seed(1)
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])


def loss_and_tape(model, scale_inputs: float = 1.0):
    x = tf.constant(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3) * scale_inputs)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x)))
    return loss, tape


def test_gradients_go_through_the_loss_scale_so_float16_gradients_do_not_underflow():
    layer = keras.layers.Dense(2, dtype="mixed_float16", kernel_initializer="ones", use_bias=False)
    model = keras.Sequential([keras.Input((3,)), layer])
    x = tf.constant(np.full((4, 3), 1e-5, np.float32))

    def loss_and_tape():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x)))  # float16 all the way: gradients ~3e-10
        return loss, tape

    loss, tape = loss_and_tape()
    plain = tape.gradient(loss, model.trainable_variables)[0]
    assert not np.any(plain.numpy()), "the set-up must underflow without a loss scale"
    optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1), dynamic=False, initial_scale=2.0**15)
    assert is_loss_scaled(optimizer)
    loss, tape = loss_and_tape()
    update = gradients(tape, loss, model.trainable_variables, optimizer)
    np.testing.assert_allclose(update.gradients[0].numpy(), np.full((3, 2), 2 * 3e-5 / 8 * 4 * 1e-5), rtol=0.05)
    assert update.loss is loss and update.variables == list(model.trainable_variables)


def test_applying_scaled_gradients_raises_no_forgot_to_scale_warning(caplog):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, dtype="mixed_float16")])
    optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.cast(model(tf.ones((4, 3))), tf.float32))
    update = gradients(tape, loss, model.trainable_variables, optimizer)
    with caplog.at_level("WARNING"):
        optimizer.apply_gradients(zip(update.gradients, update.variables))
    assert "worse model quality" not in caplog.text


def test_batch_mean_divides_by_the_global_batch():
    batch = Batch(images=None, masks=None, global_batch=8, step=tf.constant(1, tf.int64))
    assert float(batch.mean(tf.constant([1.0, 2.0, 3.0, 2.0]))) == 1.0  # this replica's half of 8


def fake_member():
    diverged, diverged_step = tf.Variable(False), tf.Variable(tf.constant(-1, tf.int64))
    return SimpleNamespace(isolate_divergence=True, diverged=diverged, diverged_step=diverged_step, state_variables=lambda: [diverged, diverged_step])


def test_a_non_finite_update_is_skipped_and_the_member_frozen_from_that_step():
    model, member = tiny_model(), fake_member()
    optimizer = keras.optimizers.SGD(0.1)
    optimizer.build(model.trainable_variables)
    before = [v.numpy().copy() for v in model.trainable_variables]
    loss, tape = loss_and_tape(model, scale_inputs=float("nan"))
    apply_if_finite(member, [gradients(tape, loss, model.trainable_variables, optimizer)], tf.constant(7, tf.int64))
    assert all(np.array_equal(a, v.numpy(), equal_nan=True) for a, v in zip(before, model.trainable_variables))
    assert bool(member.diverged.numpy()) and int(member.diverged_step.numpy()) == 7
    loss, tape = loss_and_tape(model)  # finite again: a diverged member stays frozen
    apply_if_finite(member, [gradients(tape, loss, model.trainable_variables, optimizer)], tf.constant(8, tf.int64))
    assert all(np.array_equal(a, v.numpy()) for a, v in zip(before, model.trainable_variables))
    assert int(member.diverged_step.numpy()) == 7


def test_a_finite_update_is_applied():
    model, member = tiny_model(), fake_member()
    optimizer = keras.optimizers.SGD(0.1)
    optimizer.build(model.trainable_variables)
    before = [v.numpy().copy() for v in model.trainable_variables]
    loss, tape = loss_and_tape(model)
    apply_if_finite(member, [gradients(tape, loss, model.trainable_variables, optimizer)], tf.constant(1, tf.int64))
    assert not all(np.array_equal(a, v.numpy()) for a, v in zip(before, model.trainable_variables))
    assert not bool(member.diverged.numpy())


def _if_ops_lowered(member) -> list[bool]:
    """Whether each If op of a traced guard about `member` is lowered into Switch/Merge."""
    @tf.function
    def guarded(x):
        return member_branch(member, x > 0, lambda: x + 1.0, lambda: x - 1.0)

    graph = guarded.get_concrete_function(tf.TensorSpec([], tf.float32)).graph
    assert float(guarded(tf.constant(2.0))) == 3.0 and float(guarded(tf.constant(-2.0))) == -3.0
    return [op.get_attr("_lower_using_switch_merge") for op in graph.get_operations() if op.type in ("If", "StatelessIf")]


def test_a_members_branch_stays_one_op_unless_its_variables_span_two_devices():
    # One op: Grappler optimizes the branch on its own, when first taken (core/branches.py).
    with tf.device("/cpu:0"):
        alone = [tf.Variable(1.0), tf.Variable(2.0)]
    assert _if_ops_lowered(SimpleNamespace(state_variables=lambda: alone)) == [False]
    # Variables on two devices (a GAN's discriminator on the next one): lowered, each op placed apart.
    with tf.device("/cpu:1"):
        elsewhere = tf.Variable(3.0)
    assert _if_ops_lowered(SimpleNamespace(state_variables=lambda: [*alone, elsewhere])) == [True]
