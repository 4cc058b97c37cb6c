"""A tf.cond whose branches run as functions of their own (one If op), not spliced into the step.

Inside a tf.function, TensorFlow "lowers" a tf.cond by default: each branch's ops are copied into
the surrounding graph behind a Switch op per captured tensor and a Merge per output. The fused step
has two branches per member, its switch (the whole step) and its apply-if-finite guard (the
optimizer's update), and each captures every variable, gradient and optimizer slot of the member.
Lowered, they added about 2,800 nodes to the quickstart's graph (four resnet18 networks) and about
5 s to the fused step's first call, the graph optimizer and executor working over the larger graph
(docs/benchmarks.md, "The first call"). Kept as an If op, each branch is a function optimized on its
own once, and the If op calls the branch that its predicate chooses: the same ops, in the same
order, so the same results (the bit-for-bit tests run on this form).

Members pinned to several devices (`per_model` over two or more) keep both branches lowered: an
If op kept whole is placed on one device as a unit, and its branch then reads variables pinned to
another (TensorFlow refuses such a graph: a GAN's guard under `per_model` on two CPUs did); lowered,
each op is placed on its own device as outside a cond, which is what the pins ask for.
"""

from __future__ import annotations

from harness.core.backend import import_tf

tf = import_tf()

_IF_OPS = ("If", "StatelessIf")


def cond(pred, true_fn, false_fn, as_function: bool = True):
    """tf.cond(pred, true_fn, false_fn); with `as_function` (and while tracing) its If op is kept
    whole instead of lowered into Switch and Merge ops."""
    if not as_function or tf.executing_eagerly():
        return tf.cond(pred, true_fn, false_fn)
    graph = tf.compat.v1.get_default_graph()
    known = len(graph.get_operations())
    result = tf.cond(pred, true_fn, false_fn)
    # The If op is created in this graph (its branches' ops live in their own graphs): mark it
    # before the function that holds it is finished, which is when the attribute is read.
    for op in graph.get_operations()[known:]:
        if op.type in _IF_OPS:
            op._set_attr("_lower_using_switch_merge", _FALSE)
    return result


def _attr_false():
    from tensorflow.core.framework import attr_value_pb2

    return attr_value_pb2.AttrValue(b=False)


_FALSE = _attr_false()
