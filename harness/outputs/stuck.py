"""Networks whose output hardly depends on their input (`output_spread`, measured at the end of a
run: training/output_spread.py): which count as stuck, and how the run says so: in its warnings,
summary.csv's `stuck_seeds` and its verdict, each naming the stuck seeds.

STUCK_BELOW: this project's trained networks measured 0.31-0.88; networks at initialisation
0.0004-0.36; experiments/autoencoders.yaml's four-level autoencoder, on the plateau of the mean
image after its 128 steps, 3e-7, 0.0033 and 0 in three seeds (docs/comparing.md, "Stuck
networks"): 0.01 is 30x under the first and 3x over the last.
"""

from __future__ import annotations

from typing import Iterator, Mapping

import pandas as pd

from harness.config.naming import members_said, seeds_of_each_model

STUCK_BELOW = 0.01
STUCK_SEEDS = "stuck_seeds"  # summary.csv's column naming them; in a nightly's history, their number
WHAT_IT_MEANS = ("a stuck network has not learned to use its input (a plateau, dead units or a collapse): its place in the "
                 "ranking and its differences with the others say how far it is from learning, not what its architecture can do")


def is_stuck(spread) -> bool:
    return spread is not None and not pd.isna(spread) and float(spread) < STUCK_BELOW


def _measured(spreads: Mapping[str, float | None]) -> Iterator[tuple[str, list[str], list[str]]]:
    """(model, its measured members, the stuck ones among them) for each model with a member
    measured (`spreads`: member -> output_spread, None or NaN where not measured: a failed seed,
    a kind whose prediction is not one array)."""
    for model, members in seeds_of_each_model(spreads).items():
        if measured := [m for m in members if spreads[m] is not None and not pd.isna(spreads[m])]:
            yield model, measured, [m for m in measured if is_stuck(spreads[m])]


def stuck_seeds(spreads: Mapping[str, float | None]) -> dict[str, tuple[list[str], int]]:
    """model -> (its stuck members, how many of its members were measured), for each model with one."""
    return {model: (stuck, len(measured)) for model, measured, stuck in _measured(spreads) if stuck}


def stuck_seed_counts(spreads: Mapping[str, float | None]) -> dict[str, int]:
    """model -> how many of its seeds are stuck, 0 for a model whose every measured seed learned;
    for each model with a seed measured (what a nightly compares with the night before)."""
    return {model: len(stuck) for model, _, stuck in _measured(spreads)}


def stuck_output_warnings(spreads: Mapping[str, float | None]) -> list[str]:
    """One warning per model any of whose seeds is stuck, naming the seeds with their figures."""
    warnings = []
    for model, (stuck, measured) in stuck_seeds(spreads).items():
        figures = ", ".join(f"{spreads[m]:.2g}" for m in stuck)
        which = model if measured == 1 else f"{model}, in {len(stuck)} of {measured} seeds ({members_said(stuck)}),"
        warnings.append(f"{which} gives nearly the same output for every validation image (output_spread {figures}, under "
                        f"{STUCK_BELOW}): {WHAT_IT_MEANS}; train it longer or at another learning rate (docs/comparing.md, "
                        "\"Stuck networks\")")
    return warnings


def collapsed_late_warnings(spreads: Mapping[str, tuple[float | None, float | None, int | None]]) -> list[str]:
    """One warning per member whose last weights are stuck where the weights it was ranked with
    (chosen on validation, scored on the test split) are not: it collapsed after them. The ranking
    is right; the exported final model is the collapsed one. `spreads`: member -> (output_spread of
    the scored weights, of the last weights or None where they are the same, the chosen step)."""
    return [
        f"{name}'s final weights give nearly the same output for every validation image (output_spread {last:.2g}, under "
        f"{STUCK_BELOW}), where the weights it is ranked and tested with, chosen on validation at step {step}, measured "
        f"{scored:.2g}: it collapsed after step {step}. The ranking is of step {step}'s weights: serve models/{name}/best.keras, "
        f"not the final model beside it, and see its curve (curves.png, losses.csv) for when (docs/comparing.md, \"Stuck networks\")"
        for name, (scored, last, step) in spreads.items()
        if is_stuck(last) and scored is not None and not is_stuck(scored)
    ]


def stuck_cell(members: pd.DataFrame) -> str | None:
    """summary.csv's `stuck_seeds` for one model from its members' rows: each stuck one with its
    figure and how many were measured (`seed002@1 3.2e-07, seed002@3 0 (2 of 3)`), or None."""
    spreads = dict(zip(members["model"].astype(str), pd.to_numeric(members["output_spread"], errors="coerce")))
    found = stuck_seeds(spreads)
    if not found:
        return None
    ((stuck, measured),) = found.values()
    return ", ".join(f"{m} {spreads[m]:.2g}" for m in stuck) + (f" ({len(stuck)} of {measured})" if measured > 1 else "")


def stuck_models_text(summary: pd.DataFrame | None, under: str | None = None) -> str:
    """The verdict's sentence on the models with a stuck seed (summary.csv's `stuck_seeds`), or "";
    `under`: a column each model is named under (`harness compare`'s `run`)."""
    if summary is None or STUCK_SEEDS not in summary:
        return ""
    named = summary[summary[STUCK_SEEDS].map(lambda cell: isinstance(cell, str) and bool(cell))]
    cells = [f"{where}: {cell}" if under else cell for where, cell in zip(named[under] if under else named.index, named[STUCK_SEEDS])]
    if not cells:
        return ""
    return f"Stuck, the output nearly the same for every image (output_spread under {STUCK_BELOW}): {'; '.join(cells)}; {WHAT_IT_MEANS}."
