"""Section `trace`: what the first call of each form of the step costs, each in a fresh process as
a user's command meets it (the `loop` section traces its contenders one after another in one
process, where the first pays the process's one-time costs for the others).

Contenders, alternating, the order rotated each round: the seed-003 hand loop (one step per call),
the fused step at one step per call, at ten (the graph loop of `steps_per_call`), and at ten with a
switch per member, as a run on one replica builds it. Each process builds its contender, times its
first call and then a second call of the same steps; `trace_s` is the first less the second (the
trace and the first call's one-time work), so contenders with ten steps in their first call compare
with the hand loop's one.

    python -m harness.bench.trace SUITE CONTENDER      # one process's figures, a JSON line
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import pandas as pd

from harness.bench.timing import _section, child_figures, paired_ratios, rotated

# name -> (steps per call, a switch per member)
CONTENDERS = {
    "hand_loop": (1, False),
    "harness_k1": (1, False),
    "harness_k10": (10, False),
    "harness_k10_switched": (10, True),
}


def bench_trace(suite: str, rounds: int, contenders: list[str] | None = None) -> pd.DataFrame:
    """Per contender, medians over `rounds` fresh processes of its first call, its second and their
    difference, and the median per-round ratio of that difference to the hand loop's."""
    names = contenders or list(CONTENDERS)
    measured: dict[str, list[dict]] = {name: [] for name in names}
    for r in range(rounds):
        for name in rotated(names, r):
            print(f"bench: trace: {name} (round {r + 1} of {rounds}) ...", file=sys.stderr, flush=True)
            measured[name].append(_in_fresh_process(suite, name))
    return _section("trace", [_row(name, runs, measured.get("hand_loop")) for name, runs in measured.items()])


def _row(name: str, runs: list[dict], hand: list[dict] | None) -> dict:
    def median(key):
        return round(statistics.median(run[key] for run in runs), 2)

    row = {"contender": name, "steps_per_call": runs[0]["steps_per_call"], "rounds": len(runs),
           "first_call_s": median("first_call_s"), "second_call_s": median("second_call_s"), "trace_s": median("trace_s"),
           "trace_s_min": round(min(run["trace_s"] for run in runs), 2), "trace_s_max": round(max(run["trace_s"] for run in runs), 2)}
    if hand:  # the same round's processes, one after the other
        row["trace_ratio"] = round(statistics.median(paired_ratios((r["trace_s"] for r in runs), (b["trace_s"] for b in hand))), 3)
    return row


def _in_fresh_process(suite: str, contender: str) -> dict:
    return child_figures([sys.executable, "-m", "harness.bench.trace", suite, contender], f"bench trace: {contender}")


def measure(suite: str, contender: str) -> dict:
    """Build `contender` on the suite's models, time its first call, then a second of the same steps."""
    from harness.bench.contenders import make_fused_contender, make_hand_loop_contender
    from harness.bench.suites import SUITES
    from harness.bench.timing import _with

    steps, switched = CONTENDERS[contender]
    config = _with(SUITES[suite])
    built = make_hand_loop_contender(config, contender) if contender == "hand_loop" else make_fused_contender(config, contender, steps, switched=switched)
    began = time.perf_counter()
    built.call(steps)
    second = time.perf_counter() - began
    return {"contender": contender, "steps_per_call": steps, "first_call_s": round(built.trace_s, 3),
            "second_call_s": round(second, 3), "trace_s": round(built.trace_s - second, 3)}


if __name__ == "__main__":
    import harness  # noqa: F401  (tf_keras selected before TensorFlow)

    print(json.dumps(measure(*sys.argv[1:3])), flush=True)
