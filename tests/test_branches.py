"""Branches kept as functions (core.branches): If ops not lowered where every member is on one
device, lowered where members are pinned to several; a kept If runs its branch's stateful ops in
order and the guard still skips a non-finite update when traced."""

from __future__ import annotations

import numpy as np
from conftest import tiny_config
from test_member_step import fake_member, tiny_model

from harness.config.loading import validate_config
from harness.core import branches
from harness.core.backend import import_keras, import_tf
from harness.core.member_step import apply_if_finite, gradients
from harness.core.placement import build_placement
from harness.core.step import make_train_loop
from harness.data.pipeline import build_datasets
from harness.members.registry import build_members

tf = import_tf()
keras = import_keras()


def lowering_of_ifs(concrete) -> list[bool]:
    """`_lower_using_switch_merge` of every If op in a traced function, its branches' included
    (an If without the attribute is lowered: TensorFlow's default inside a tf.function)."""
    graph_def = concrete.graph.as_graph_def()
    nodes = list(graph_def.node) + [n for f in graph_def.library.function for n in f.node_def]
    return [n.attr["_lower_using_switch_merge"].b if "_lower_using_switch_merge" in n.attr else True for n in nodes if n.op in ("If", "StatelessIf")]


def test_a_branch_kept_as_a_function_runs_its_stateful_ops_in_order():
    counter = tf.Variable(1.0)

    def bump_then_read():
        counter.assign_add(1.0)
        return counter.read_value() * 10.0  # must see the assignment above

    def step(pred, as_function):
        return branches.cond(pred, bump_then_read, lambda: tf.constant(-1.0), as_function=as_function)

    kept = tf.function(lambda pred: step(pred, True))
    lowered = tf.function(lambda pred: step(pred, False))
    spec = tf.TensorSpec([], tf.bool)
    assert lowering_of_ifs(kept.get_concrete_function(spec)) == [False]
    assert lowering_of_ifs(lowered.get_concrete_function(spec)) == [True]
    assert float(kept(tf.constant(True))) == 20.0 and float(counter.numpy()) == 2.0
    assert float(kept(tf.constant(False))) == -1.0 and float(counter.numpy()) == 2.0
    assert float(lowered(tf.constant(True))) == 30.0


def test_the_traced_guard_skips_a_non_finite_update_and_applies_a_finite_one():
    model, member = tiny_model(), fake_member()
    optimizer = keras.optimizers.SGD(0.1)
    optimizer.build(model.trainable_variables)

    @tf.function
    def guarded(scale, step):
        with tf.GradientTape() as tape:  # NaN when scale is NaN: its gradients too
            loss = tf.reduce_mean(tf.square(model(tf.ones((4, 3)) * scale)))
        apply_if_finite(member, [gradients(tape, loss, model.trainable_variables, optimizer)], step)

    before = [v.numpy().copy() for v in model.trainable_variables]
    guarded(tf.constant(1.0), tf.constant(1, tf.int64))
    after_finite = [v.numpy().copy() for v in model.trainable_variables]
    assert not all(np.array_equal(a, b) for a, b in zip(before, after_finite))
    guarded(tf.constant(float("nan")), tf.constant(2, tf.int64))
    assert all(np.array_equal(a, v.numpy()) for a, v in zip(after_finite, model.trainable_variables))
    assert bool(member.diverged.numpy()) and int(member.diverged_step.numpy()) == 2
    assert lowering_of_ifs(guarded.get_concrete_function(tf.TensorSpec([], tf.float32), tf.TensorSpec([], tf.int64))) == [False]


def fused_step_ifs(placement_section: dict) -> list[bool]:
    config = validate_config(tiny_config(placement=placement_section))
    placement = build_placement(config)
    with placement.strategy.scope():
        members = build_members(config, placement.model_devices)
        global_step = tf.Variable(0, dtype=tf.int64)
        switches = {m.name: tf.Variable(True) for m in members}
    loop = make_train_loop(members, placement, global_step, config.data.batch_size, 1, switches=switches)
    datasets = build_datasets(config.data, config.training_seeds()[:1], 0, 2)
    return lowering_of_ifs(loop._step_fn.get_concrete_function(placement.input_iterator(datasets.train)))


def test_the_fused_step_keeps_its_branches_whole_on_one_device_and_lowers_them_over_several():
    one_device = fused_step_ifs({"strategy": "one_device"})
    members = len(tiny_config()["models"])
    assert one_device == [False] * (2 * members)  # each member's switch and guard
    assert fused_step_ifs({"strategy": "per_model", "logical_cpus": 2}) == [True] * (2 * members)
