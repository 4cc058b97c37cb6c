"""`member_branch`: a tf.cond kept as one op in the compiled graph, for the guard that applies a
member's update only if it is finite (`member_step.apply_if_finite`).

Inside a tf.function TensorFlow lowers a tf.cond into Switch and Merge nodes and copies both
branches into the step's graph before Grappler optimizes it. The guard's branch captures every
gradient, variable and optimizer slot of its member: lowered, each gets a Switch, and Grappler's
passes over the whole graph at the first call grow with them. Kept whole, the branch is a
function the If op calls, optimized on its own. Measured on this project's 2-core CPU machine
(docs/fixed_costs_log.md): the quickstart's step (four resnet18 networks) traced in 28-29 s against
41 s lowered, as fast as the hand loop's (27-33 s), smoke's first call 4.1-4.6 s against 5.5-5.6 s,
a 12-member grid's 18.5-18.8 s against 20.0-23.0 s; steps no slower (the quickstart's 1.000x and
1.004x the hand loop against 0.978x and 1.002x, intervals overlapping).

Only the guard: its branch holds the optimizer's update alone. A member's switch
(`step.switched`) wraps its forward and backward pass, which lose Grappler's rewrites (fused
convolutions) in a branch kept whole: 4-6% slower steps when that was tried.

An If op kept whole is placed on one device with every variable its branches read: a member
whose variables live on two devices (a GAN with `discriminator_device: next`, a kind of the
user's that pins a part elsewhere) keeps the lowered cond, whose ops are placed one by one.

The ops are the same either way: results are bit for bit the same (the bit-for-bit tests train
through the guard).
"""

from __future__ import annotations

from harness.core.backend import import_tf

tf = import_tf()
from tensorflow.core.framework import attr_value_pb2  # noqa: E402  (after import_tf)

_KEEP_WHOLE = attr_value_pb2.AttrValue(b=False)  # the If op's `_lower_using_switch_merge`


def member_branch(member, pred, true_fn, false_fn):
    """tf.cond(pred, true_fn, false_fn) about `member`, kept one op when all of the member's
    variables are on one device (traced code only; eagerly it is a plain tf.cond)."""
    if not on_one_device(member):
        return tf.cond(pred, true_fn, false_fn)
    graph = tf.compat.v1.get_default_graph()
    first = len(graph.get_operations())
    result = tf.cond(pred, true_fn, false_fn)
    for op in graph.get_operations()[first:]:  # the cond's own ops; its branches live in graphs of their own
        if op.type in ("If", "StatelessIf"):
            op._set_attr("_lower_using_switch_merge", _KEEP_WHOLE)
    return result


def on_one_device(member) -> bool:
    """Whether every variable the member's step may change lives on one device."""
    return len({v.device for v in member.state_variables()}) <= 1
