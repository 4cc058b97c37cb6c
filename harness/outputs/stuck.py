"""Networks whose output hardly depends on their input (`output_spread`, measured at the end of a
run: training/output_spread.py): which count as stuck, and how the run says so, per seed in its
warnings and per model in its verdict.

STUCK_BELOW: this project's trained networks measured 0.31-0.62; networks at initialisation
0.0004-0.36; experiments/autoencoders.yaml's four-level autoencoder, on the plateau of the mean
image after its 128 steps, 3e-7, 0.0033 and 0 in three seeds (docs/comparing.md, "Stuck
networks"): 0.01 is 30x under the first and 3x over the last.
"""

from __future__ import annotations

import pandas as pd

from harness.config.naming import members_said, seeds_of_each_model

STUCK_BELOW = 0.01
WHAT_IT_MEANS = ("a stuck network has not learned to use its input (a plateau, dead units or a collapse): its place in the "
                 "ranking and its differences with the others say how far it is from learning, not what its architecture can do")


def is_stuck(spread) -> bool:
    return spread is not None and not pd.isna(spread) and float(spread) < STUCK_BELOW


def stuck_output_warnings(spreads: dict[str, float | None]) -> list[str]:
    """One warning per model any of whose seeds is stuck (`spreads`: member -> output_spread, None
    where not measured), naming the seeds."""
    warnings = []
    for model, members in seeds_of_each_model(spreads).items():
        measured = [m for m in members if spreads[m] is not None]
        if not (stuck := [m for m in measured if is_stuck(spreads[m])]):
            continue
        figures = ", ".join(f"{spreads[m]:.2g}" for m in stuck)
        which = model if len(measured) == 1 else f"{model}, in {len(stuck)} of {len(measured)} seeds ({members_said(stuck)}),"
        warnings.append(f"{which} gives nearly the same output for every validation image (output_spread {figures}, under "
                        f"{STUCK_BELOW}): {WHAT_IT_MEANS}; train it longer or at another learning rate (docs/comparing.md, "
                        "\"Stuck networks\")")
    return warnings


def stuck_models_text(summary: pd.DataFrame | None) -> str:
    """The verdict's sentence on models whose output_spread (their seeds' mean) is under
    STUCK_BELOW, or ""."""
    if summary is None or "output_spread" not in summary:
        return ""
    stuck = [f"{m} ({v:.2g})" for m, v in zip(summary["model"], summary["output_spread"]) if is_stuck(v)]
    if not stuck:
        return ""
    return f"Stuck, the output nearly the same for every image (output_spread under {STUCK_BELOW}): {', '.join(stuck)}; {WHAT_IT_MEANS}."
