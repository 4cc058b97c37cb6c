"""Expected best score against the tuning budget (Dodge et al. 2019, "Show Your Work").

"Unet vs FPN, each at its best learning rate" depends on how many learning rates each was given:
the best of eight draws is higher than the best of two from the same spread, and an architecture
that wins with a large search can lose with a small one. Within each `output.compare_by` group the
models are the trials of one search; for a budget of k trials, drawn with replacement from those
the group ran, the expected best validation score is an average over the trials sorted worst to
best: the i-th is the best of k trials drawn *without* replacement with probability
C(i-1, k-1) / C(n, k), the unbiased estimator of Tang et al. (2020). Dodge et al. drew with
replacement, (i/n)^k - ((i-1)/n)^k, which is biased low, the more so the larger k and the wider
the group's trials spread (at k = n it falls below the best trial run, the one the per-group
choice takes: measured in a simulation, 0.24-0.29 standard deviations of the trials at k = n for
n = 3-8; docs/comparing.md). The spread (`_std`) stays the with-replacement one: the outcome's
spread over draws from the trials' distribution, which without replacement would be 0 at k = n.
The same weights give the expected *test* score of the model the k trials would choose on
validation: what a search of that size would report on images it did not choose with.

Every model a group trained is a trial, the failures too: a model that diverged or that a race
dropped ranks below every one that finished (the choice never takes it), with the score it had
when it left; leaving it out would flatter an architecture whose search fails often. Each group's
curve runs from 1 trial to the number it ran: beyond it the estimate could only repeat the best
seen. A model with repeats is one trial scored by its mean over seeds (its seeds are chosen
together, as the per-group choice does).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.config.metrics import bounds, higher_is_better

TRIALS_COLUMNS = ("group", "trials", "candidates", "unfinished", "chosen_by", "expected_best", "expected_best_std")


def best_of_k_weights(n: int, k: int) -> np.ndarray:
    """P(the i-th worst of n trials is the best of k of them drawn without replacement), i = 1..n;
    k beyond n is n (every trial drawn)."""
    from math import comb

    k = min(k, n)
    return np.array([comb(i - 1, k - 1) for i in range(1, n + 1)], dtype=float) / comb(n, k)


def spread_weights(n: int, k: int) -> np.ndarray:
    """P(the i-th worst of n trials is the best of k draws with replacement), i = 1..n: the
    outcome's distribution whose spread `_std` reports."""
    ranks = np.arange(1, n + 1) / n
    return ranks**k - (ranks - 1 / n) ** k


def worst_to_best(chosen_by, higher: bool = True, finished=None) -> np.ndarray:
    """The trials' order from worst to best: a trial that did not finish (diverged, dropped by a
    race) below every one that did, then by score; among equals the earlier trial ranks as the
    better (the one the per-group choice takes)."""
    chosen_by = np.asarray(chosen_by, dtype=float)
    done = np.ones(len(chosen_by), bool) if finished is None else np.asarray(finished, bool)
    return np.lexsort((-np.arange(len(chosen_by)), chosen_by if higher else -chosen_by, done))


def expected_best_of_k(values, k: int, higher: bool = True, finished=None) -> tuple[float, float]:
    """The expected best of k of `values` (without replacement) and the spread of the best of k
    draws (with replacement): the score of the chosen, when what chooses is what is scored."""
    return expected_score_of_chosen(values, values, k, higher, finished)


def expected_score_of_chosen(chosen_by, scored, k: int, higher: bool = True, finished=None) -> tuple[float, float]:
    """The expected `scored` of the trial that the best `chosen_by` picks among k trials (drawn
    without replacement), and its spread over k draws with replacement."""
    scored = np.asarray(scored, dtype=float)
    ordered = scored[worst_to_best(chosen_by, higher, finished)]
    expected = float(np.dot(best_of_k_weights(len(ordered), k), ordered))
    spread = spread_weights(len(ordered), k)
    around = float(np.dot(spread, ordered))  # the spread is about the with-replacement outcome's own mean
    return expected, float(np.sqrt(max(float(np.dot(spread, (ordered - around) ** 2)), 0.0)))


def scored_trials(trials: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """The trials with a value for every column: a trial without one (diverged before it was
    scored) counts as the worst a bounded metric allows (an IoU of 0), and is left out for an
    unbounded one (a loss)."""
    trials = trials.copy()
    for column in columns:
        if (limits := bounds(column)) is not None:
            trials[column] = trials[column].fillna(limits[0] if higher_is_better(column) else limits[1])
    return trials.dropna(subset=columns)


def budget_table(trials: pd.DataFrame, chosen_by: str, reported: str | None) -> pd.DataFrame:
    """One row per group and budget k = 1..(the trials the group ran). `trials`: the models each
    group tried, with `group`, `chosen_by`, (with a test split) `reported`, and `finished` (False
    for a diverged or race-dropped one: ranked below every finished one, as the choice never
    takes it; without the column every trial finished)."""
    higher = higher_is_better(chosen_by)
    rows = []
    for group, tried in trials.groupby("group", sort=False):
        tried = scored_trials(tried, [chosen_by] + ([reported] if reported else []))
        done = tried["finished"].to_numpy(bool) if "finished" in tried else np.ones(len(tried), bool)
        for k in range(1, len(tried) + 1):
            best, best_std = expected_best_of_k(tried[chosen_by], k, higher, done)
            row = {"group": group, "trials": k, "candidates": len(tried), "unfinished": int((~done).sum()), "chosen_by": chosen_by,
                   "expected_best": best, "expected_best_std": best_std}
            if reported:
                score, score_std = expected_score_of_chosen(tried[chosen_by], tried[reported], k, higher, done)
                row.update(reported=reported, expected_reported=score, expected_reported_std=score_std)
            rows.append(row)
    return pd.DataFrame(rows, columns=None if rows else list(TRIALS_COLUMNS))


def curve(table: pd.DataFrame) -> tuple[str, str, str]:
    """(the column the groups are compared by, the metric it holds, what it is in words): the
    expected test score of the chosen when there is a test split, else the expected best."""
    if "expected_reported" in table:
        return "expected_reported", str(table["reported"].iloc[0]), "expected test score of the model chosen on validation"
    return "expected_best", str(table["chosen_by"].iloc[0]), "expected best validation score"


def leaders(table: pd.DataFrame) -> list[tuple[int, str, float]]:
    """(k, the group ahead at budget k, its margin over the next) for every k two or more groups
    reached. A group none of whose trials finished is not in the running: its curve is the best of
    models the choice never takes (a race that dropped them all), which cannot put it ahead."""
    if "unfinished" in table:
        table = table[table["unfinished"] < table["candidates"]]
    if table.empty:
        return []
    value, metric, _ = curve(table)
    higher = higher_is_better(metric)
    out = []
    for k, rows in table.groupby("trials"):
        if rows["group"].nunique() >= 2:
            ordered = rows.sort_values(value, ascending=not higher, kind="stable")
            margin = abs(float(ordered[value].iloc[0]) - float(ordered[value].iloc[1]))
            out.append((int(k), str(ordered["group"].iloc[0]), margin))
    return out


def describe_leaders(table: pd.DataFrame) -> str:
    """Which group is ahead at which budgets, and by how much: the point of the curve is that the
    leader can change with the budget, and a margin smaller than the spread is no verdict."""
    ahead = leaders(table)
    if not ahead:
        return ""
    spans: list[list] = []  # [group, first k, last k, margins]
    for k, group, margin in ahead:
        if spans and spans[-1][0] == group and spans[-1][2] == k - 1:
            spans[-1][2] = k
            spans[-1][3].append(margin)
        else:
            spans.append([group, k, k, [margin]])
    value, _, where = curve(table)
    spread = table[f"{value}_std"]
    caveat = (f" These are expectations over the trials run, with no interval; the spread of each (±) is "
              f"{spread.min():.4f}-{spread.max():.4f}, so a smaller margin is no verdict.")
    if len(spans) == 1:
        group, first, last, margins = spans[0]
        at = _trials(first, last) if first == last else f"every budget from {first} to {last} trials"
        return f"By {where}, {group} is ahead at {at} ({_margins(margins)})." + caveat
    parts = [f"{group} at {_trials(first, last)} ({_margins(margins)})" for group, first, last, margins in spans]
    return f"Which group is ahead depends on the tuning budget (by {where}): " + ", then ".join(parts) + "." + caveat


def _trials(first: int, last: int) -> str:
    return f"{first} trial{'s' if first > 1 else ''}" if first == last else f"{first}-{last} trials"


def _margins(margins: list[float]) -> str:
    low, high = min(margins), max(margins)
    return f"by {low:.4f} over the next" if low == high else f"by {low:.4f}-{high:.4f} over the next"
