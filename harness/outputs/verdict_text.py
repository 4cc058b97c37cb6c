"""The verdict in words: what the ranking's pairs support and what their intervals cover (one
seed: image noise only; repeats: seeds and images, Holm-adjusted), which models were not compared
and why, and which images the scores are on. Printed under the ranking, in report.html, and by
`harness compare --pairs`."""

from __future__ import annotations

import math

import pandas as pd

from harness.config.metrics import higher_is_better, metric_of, on_split, split_column
from harness.outputs.statistics import covers_training
from harness.outputs.stuck import stuck_models_text
from harness.outputs.tables import failed, finished

MAX_LISTED = 3  # differences named in a sentence, the largest first; the rest counted (every pair is in pairs.csv)


def _listed(rows: list, rank_by: str, where: str, suffix=lambda row: "") -> str:
    """The largest differences by size, then how many more and where they are."""
    ordered = sorted(rows, key=lambda row: -abs(row.diff))
    named = [_difference(row, rank_by) + suffix(row) for row in ordered[:MAX_LISTED]]
    rest = len(ordered) - len(named)
    return "; ".join(named) + (f"; and {rest} more ({where})" if rest else "")


def verdict(pairs: pd.DataFrame, rank_by: str, summary: pd.DataFrame | None = None, table: str = "pairs.csv") -> str:
    """What the comparison supports, in words, and what its intervals cover: with one training
    seed no difference between models is called supported (training randomness was not measured);
    with repeats, the supported differences, the others with the repeats that might resolve
    them, and each model's seed-to-seed spread. `table`: where every pair is listed."""
    if "supported" not in pairs or pairs["supported"].isna().all() or "covers" not in pairs:
        return _no_verdict(rank_by, summary)
    rows = list(pairs.dropna(subset=["supported"]).itertuples(index=False))
    if not any(covers_training(row.covers) for row in rows):
        return _one_seed_verdict(rows, rank_by, summary, table)
    return _seeds_verdict(rows, rank_by, summary, table)


def _one_seed_verdict(rows: list, rank_by: str, summary: pd.DataFrame | None, table: str) -> str:
    beyond = [row for row in rows if getattr(row, "beyond_image_noise", False)]
    noise = _image_noise(rank_by)
    text = (f"One training seed: the intervals of {rank_by} cover {noise} only. Training randomness "
            "(initial weights, data order) was not measured, and it often moves differences between models more than "
            "image noise does, so no difference between these models is called supported. To measure it, set "
            "train.repeats: 3 or more.")
    if beyond:
        text += (f" Only these particular trained networks differ beyond image noise, in {len(beyond)} of {len(rows)} pairs"
                 f"{', the largest' if len(beyond) > MAX_LISTED else ''}: {_listed(beyond, rank_by, f'{table}, beyond_image_noise')}.")
    if summary is not None and "status" in summary and (left := [f"{m} ({s})" for m, s in zip(summary["model"], summary["status"]) if not finished(s)]):
        text += f" Not compared, as they did not finish (a score from fewer steps): {', '.join(left)}."
    return " ".join(filter(None, [text, stuck_models_text(summary)]))


def _seeds_verdict(rows: list, rank_by: str, summary: pd.DataFrame | None, table: str) -> str:
    # A pair with fewer than two seeds that finished in both has no interval and no test: said
    # apart, and not counted in Holm's adjustment (statistics.holm leaves it out too).
    thin = [row for row in rows if pd.isna(getattr(row, "p_t", 0.0))]
    tested = [row for row in rows if not pd.isna(getattr(row, "p_t", 0.0))]
    supported = [row for row in tested if row.supported]
    unsupported = [row for row in tested if not row.supported]
    seeds = max(int(getattr(row, "seeds", 0) or 0) for row in rows)
    parts = [f"Over {seeds} training seeds (intervals cover {rows[0].covers}; Holm-adjusted across {_pairs(len(tested))}):"]
    if not tested:
        parts.append(f"no pair of models has two seeds that finished in both, so no difference in {rank_by} has an interval.")
    elif supported:
        parts.append(f"supported differences in {rank_by} ({len(supported)} of {_pairs(len(tested))}): {_listed(supported, rank_by, f'{table}, supported', lambda row: _seeds_better(row, rank_by))}.")
    else:
        parts.append(f"no difference in {rank_by} is supported at 95%.")
    if unsupported:
        explained: set = set()
        parts.append(f"Not supported: {_listed(unsupported, rank_by, table, lambda row: _seeds_better(row, rank_by) + _before_holm(row) + _to_resolve(row, explained))}.")
    parts.append(_equivalence_text(tested, rank_by, table))
    if thin:
        parts.append("Too few seeds finished in both for an interval: " + ", ".join(
            f"{row.model_a} and {row.model_b} ({int(getattr(row, 'seeds', 0) or 0)} seed)" for row in thin) + ".")
    spread = f"{rank_by}_std"
    if summary is not None and spread in summary and summary[spread].notna().any():
        parts.append("Seed-to-seed spread (std): " + ", ".join(f"{m} {_spread(v)}" for m, v in zip(summary["model"], summary[spread]) if pd.notna(v)) + ".")
    if summary is not None and "unusual_seeds" in summary and (far := [s for s in summary["unusual_seeds"] if isinstance(s, str) and s]):
        parts.append(f"Far from their model's other seeds in {rank_by} (each seed against its others' spread, over 5 seeds or more): "
                     f"{'; '.join(far)}. Kept in the model's score and interval: a seed that now and then trains far better or "
                     "worse than the others is part of the model; its curves (plots/loss_curves) say whether something went wrong.")
    if summary is not None and "status" in summary and (failing := [f"{m} {s}" for m, s in zip(summary["model"], summary["status"]) if failed(s)]):
        parts.append(f"Not every seed finished: {', '.join(failing)}. A model's seeds that did not finish are left out of its "
                     "score, interval and pairs (one none of whose seeds finished has no interval and no pair); a seed that "
                     "diverges is a cost of its model too.")
    return " ".join(filter(None, [*parts, stuck_models_text(summary)]))


def chosen_pairs_text(pairs: pd.DataFrame, rank_by: str) -> str:
    """compare_by.csv in a sentence: each pair of the models their groups chose, the larger
    differences first, and what each is (supported or not; with one seed, beyond image noise or
    within it, none supported)."""
    if not len(pairs) or not {"diff", "covers"} <= set(pairs.columns):  # no pairs, or a table written before these columns
        return ""
    rows = [row for row in pairs.itertuples(index=False) if pd.notna(row.diff)]
    if not rows:
        return ""
    seeds = any(covers_training(row.covers) for row in rows)
    covers = f"intervals cover {rows[0].covers}; Holm-adjusted across {_pairs(holm_tested(pairs))}" if seeds else \
        f"one training seed: intervals cover {_image_noise(rank_by)} only, so none is called supported"
    listed = _listed(rows, rank_by, "compare_by.csv", lambda row: (_seeds_better(row, rank_by) if seeds else "") + f": {pair_word(row)}")
    return f"Between the chosen, on {rank_by} ({covers}): {listed}."


def pair_word(row) -> str:
    """A pair's verdict in a word or three, as a table column shows it (with an equivalence
    margin, whether the difference is inside it: statistics.mark_equivalence)."""
    if getattr(row, "supported", False):
        return "supported, within the margin" if _is_equivalent(row) else "supported"
    if _is_equivalent(row):
        return "equivalent"
    if "beyond_image_noise" in row._fields and not pd.isna(row.beyond_image_noise):
        return "beyond image noise" if row.beyond_image_noise else "within image noise"
    return "not supported"


def holm_tested(pairs: pd.DataFrame) -> int:
    """The pairs with a difference that Holm's adjustment ran over (`p_holm`; a pair of one seed
    has no test): the N of "Holm-adjusted across N pairs"."""
    rows = pairs.dropna(subset=["diff"])
    return int(rows["p_holm"].notna().sum()) if "p_holm" in rows else len(rows)


def _image_noise(rank_by: str) -> str:
    """The images a one-seed interval of `rank_by` resamples: "test-image noise" or "validation-image noise"."""
    return f"{'test' if rank_by.startswith('test_') else 'validation'}-image noise"


def _pairs(count: int) -> str:
    return f"{count} pair{'' if count == 1 else 's'}"


def _spread(value: float) -> str:
    """A seed-to-seed std to 4 decimals, or to 2 significant digits below 0.0005: seeds that
    differ by 1e-5 are not identical, which 0.0000 would say."""
    return f"{value:.4f}" if abs(value) < 1e-9 or abs(value) >= 5e-4 else f"{value:.1e}"  # < 1e-9: rounding, not seeds


def _no_verdict(rank_by: str, summary: pd.DataFrame | None) -> str:
    """Why no pair has an interval: fewer than two models finished (the others' scores come from
    fewer steps and are not compared), or the ranking column has no per-image or per-seed basis."""
    if summary is not None and "status" in summary and len(summary) > 1:
        finishers = summary["status"].map(finished)
        ended, done = summary[~finishers], [str(m) for m in summary.loc[finishers, "model"]]
        if len(done) < 2:
            how = ", ".join(f"{m}: {s}" for m, s in zip(ended["model"], ended["status"]))
            if not done:
                return (f"No verdict between models: none finished ({how}), and scores from fewer steps are not compared: "
                        "the ranking is of the scores they had when they stopped.")
            return (f"No verdict between models: only {done[0]} finished; the others did not ({how}), and a score from fewer "
                    "steps is not compared with a finished model's.")
    if summary is not None and len(summary) == 1 and (alone := _one_model(rank_by, summary.iloc[0])):
        return alone
    return f"No interval for {rank_by}: the ranking by it comes with no statement of how sure it is."


def _one_model(rank_by: str, row: pd.Series) -> str:
    """A run of one model has no pair; its interval still says how sure its score is, and of what
    (the report said there was none, the terminal nothing)."""
    covers = row.get("interval_covers")
    if not isinstance(covers, str) or pd.isna(row.get(f"{rank_by}_low")):
        return ""
    text = f"One model, so nothing to compare: the interval of its {rank_by} covers {covers}."
    if not covers_training(covers):
        return text + " To measure how its score moves with training randomness (initial weights, data order), set train.repeats: 3 or more."
    spread = row.get(f"{rank_by}_std")
    seeds = f" over {int(row['repeats'])} training seeds" if pd.notna(row.get("repeats")) else ""
    return text + (f" Seed-to-seed spread (std){seeds}: {_spread(spread)}." if pd.notna(spread) else "")


def validation_choices(config, rank_by: str) -> tuple[str, ...]:
    """What a run chooses on the validation images besides the weights a test split scores: a
    ranking on validation is flattered by each of these (and by its own pick of a winner)."""
    choices = [what for what, chosen in (
        ("each model's early stop", config.train.early_stopping is not None),
        ("the race's cuts", config.train.race is not None),
        ("each group's pick (output.compare_by)", bool(config.output.compare_by)),
        (f"each model's best evaluation ({rank_by})", rank_by == "best_val_loss"),
    ) if chosen]
    return tuple(choices)


def _on_validation(choices: tuple[str, ...]) -> str:
    if choices:
        return (f"these scores are on the validation images, the same images that chose {_and(choices)}, and on which the "
                "ranking picks its winner, so they lean optimistic.")
    return ("these scores are on the validation images, on which the ranking picks its winner, so the winner's score leans "
            "optimistic (this run chose nothing else with them: each model's last validation scores are ranked).")


def _and(items: tuple[str, ...]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def chosen_on(summary: pd.DataFrame, rank_by: str, chose_weights: bool = True, has_test: bool = False, choices: tuple[str, ...] = ()) -> str:
    """Which images the scores are on, and with a test split how much choosing on validation
    inflated the chosen weights' validation score (how much better it was than their test score).
    `chose_weights`: the test split scored weights chosen on validation (best.keras); else each
    member's weights at the end of its training (`output.select_by: final`, or no exports).
    `has_test`: the data hold out a test split, which a ranking on validation has not scored yet.
    `choices`: what else the run chose on validation (`validation_choices`)."""
    if split_column(rank_by)[0] != "test":
        on_validation = _on_validation(choices)
        if has_test:
            return f"The held-out test split is scored when the run completes, and the ranking is on it then; until then {on_validation}"
        return (f"No test split: {on_validation} Hold some images out with data.test_size (synthetic) or data.test_fraction / "
                "a test folder (real data).")
    metric = metric_of(rank_by)
    chosen = on_split(rank_by, "selected_val")
    if chose_weights:
        text = ("Ranked on the held-out test split, which nothing chose with: each model's weights were chosen on validation "
                "and scored once on test.")
        gap = f"What choosing added (how much better the chosen weights' validation {metric} was than their test {metric}"
    else:
        text = ("Ranked on the held-out test split, which nothing chose with: each model's weights at the end of its training "
                "(not its best on validation) were scored once on test.")
        gap = (f"How much better those weights' validation {metric} was than their test {metric} (they were not picked as "
               "the best on validation; an early stop, a race cut or a grid's choice still used it")
    if chosen in summary and summary[chosen].notna().any():
        # Signed so that above zero is always optimism (validation better than test), a loss too.
        sign = 1 if higher_is_better(rank_by) else -1
        gaps = {m: sign * (v - t) for m, v, t in zip(summary["model"], summary[chosen], summary[rank_by]) if pd.notna(v) and pd.notna(t)}
        text += f" {gap}; below zero, test was better): {', '.join(f'{m} {g:+.4f}' for m, g in gaps.items())}."
        if len(gaps) >= 2 and all(g < 0 for g in gaps.values()):
            # Choosing can only flatter validation: a gap below zero for every model is the splits' own.
            text += (" Every gap is below zero, which choosing cannot cause: these test images are easier than the "
                     "validation ones for every model, so the gaps measure the two splits more than the choosing.")
    return text


def _a_is_better(row, rank_by: str) -> bool:
    return (row.diff > 0) == higher_is_better(rank_by)


def better_first(pairs: pd.DataFrame) -> pd.DataFrame:
    """pairs.csv's rows turned so that `model_a` is the better of each pair, as the verdict names
    them ("unet over fcn (+0.0132 ...)"): every column that has a side follows (the difference and its
    interval, the seeds each won, the shares of resamples and steps, the common loss's difference).
    pairs.csv keeps the order the models were configured in; a figure beside the verdict reads this
    one. A tie keeps its order."""
    turned = pairs.copy()
    if not len(turned) or "metric" not in turned:
        return turned
    # A pair with a model that finished on no seed (all diverged) has no metric and no difference: kept as it is.
    scored = turned["metric"].notna() & turned["diff"].notna()
    a_better = (turned["diff"] > 0) == turned["metric"].map(higher_is_better, na_action="ignore")  # as _a_is_better
    flip = scored & (turned["diff"] != 0) & ~a_better
    swaps = [("model_a", "model_b"), ("seeds_a_better", "seeds_b_better")]
    for a, b in swaps:
        if a in turned and b in turned:
            turned.loc[flip, [a, b]] = turned.loc[flip, [b, a]].to_numpy()
    turned.loc[flip, ["diff", "diff_low", "diff_high"]] = -turned.loc[flip, ["diff", "diff_high", "diff_low"]].to_numpy()
    for share in ("p_a_better", "a_beats_b"):  # one seed's share of resamples, the common loss's share of steps
        if share in turned:
            turned.loc[flip, share] = 1 - turned.loc[flip, share]
    if "mean_loss_diff" in turned:
        turned.loc[flip, "mean_loss_diff"] = -turned.loc[flip, "mean_loss_diff"]
    return turned


def _difference(row, rank_by: str) -> str:
    """`better over worse (+diff [low, high])`, better minus worse; a tie is `a against b`."""
    if row.diff == 0:  # neither is better: no order to put them in, and no -0.0000
        return f"{row.model_a} against {row.model_b} ({signed_interval(row.diff, row.diff_low, row.diff_high)})"
    a_better = _a_is_better(row, rank_by)
    better, worse = (row.model_a, row.model_b) if a_better else (row.model_b, row.model_a)
    diff, low, high = (row.diff, row.diff_low, row.diff_high) if a_better else (-row.diff, -row.diff_high, -row.diff_low)
    return f"{better} over {worse} ({signed_interval(diff, low, high)})"


def signed_interval(diff: float, low: float, high: float) -> str:
    """`+0.0123 [+0.0045, +0.0201]`: to 4 decimals, or to 2 significant digits when the interval's
    bounds are all below 0.0005 (a difference of mean squared errors near 1e-5 would read
    `-0.0000 [-0.0001, +0.0001]`)."""
    bounds = [abs(v) for v in (diff, low, high) if math.isfinite(v)]
    small = bool(bounds) and 1e-9 < max(bounds) < 5e-4
    spec = "+.1e" if small else "+.4f"
    diff, low, high = (v + 0.0 for v in (diff, low, high))  # -0.0 + 0.0 is 0.0: a tie reads +0.0000
    return f"{diff:{spec}} [{low:{spec}}, {high:{spec}}]"


def _equivalence_text(tested: list, rank_by: str, table: str) -> str:
    """With `output.equivalence_margin`: the pairs shown to differ by less than it (statistics.
    mark_equivalence), those among them whose difference is supported too, or that none is: not
    supported says a difference is uncertain, equivalent that it is small, and a reader should not
    take the one for the other."""
    margin = next((row.equivalence_margin for row in tested if _is_set(getattr(row, "equivalence_margin", None))), None)
    if margin is None:
        return ""
    within = f"within ±{margin:g} in {rank_by} (output.equivalence_margin)"
    equivalent = [row for row in tested if _is_equivalent(row)]
    if not equivalent:
        return (f"No pair is shown equivalent {within}: a difference not supported may still be one that matters, "
                "unless more seeds narrow it inside the margin.")
    text = (f"Equivalent {within}, their difference inside it with 95% confidence (two one-sided tests, Holm-adjusted), "
            f"{len(equivalent)} of {_pairs(len(tested))}: {_listed(equivalent, rank_by, f'{table}, equivalent')}.")
    if real := [row for row in equivalent if row.supported]:
        text += f" Of these, supported too, a real difference smaller than the margin: {', '.join(f'{r.model_a} and {r.model_b}' for r in real)}."
    return text


def _is_set(value) -> bool:
    return value is not None and not pd.isna(value)


def _is_equivalent(row) -> bool:
    """pairs.csv's `equivalent` (a table written without a margin, or before the column, has none)."""
    return _is_set(getattr(row, "equivalent", None)) and bool(row.equivalent)


def _seeds_better(row, rank_by: str) -> str:
    """`, better in 4 of 5 seeds`: for the better of the pair, as `_difference` names it."""
    a, b, seeds = (getattr(row, name, math.nan) for name in ("seeds_a_better", "seeds_b_better", "seeds"))
    if any(v is None or pd.isna(v) for v in (a, b, seeds)):
        return ""  # pairs.csv written before these columns
    if row.diff == 0:
        return f", equal in {int(seeds - a - b)} of {int(seeds)} seeds" + (f" ({row.model_a} better in {int(a)}, {row.model_b} in {int(b)})" if a or b else "")
    return f", better in {int(a if _a_is_better(row, rank_by) else b)} of {int(seeds)} seeds"


def _never_words(row) -> tuple[str, str, str]:
    """(kind, words, why) for a pair no number of repeats is likely to resolve, by
    statistics.resolve_limit: a mean difference of zero; the seeds too few to guess from; or image
    noise hiding it (also a run written before the column, in the words it printed then)."""
    limit = getattr(row, "resolve_limit", None)
    if limit == "zero":
        return "never: zero", ", no number of repeats is likely to resolve it", " (the mean difference over the seeds is zero)"
    if limit == "seeds":
        seeds, image_se = int(getattr(row, "seeds", 0) or 0), getattr(row, "image_se", math.nan)
        hides = "image noise alone would not hide it: " if pd.notna(image_se) and image_se > 0 else ""
        return ("never: seeds", f", too uncertain from {seeds} seeds to guess how many repeats would resolve it",
                f" ({hides}more seeds would tell, unless the true difference is zero or small beside the seed-to-seed spread)")
    images = "test" if "test images" in str(getattr(row, "covers", "")) else "validation"
    return "never", ", no number of repeats is likely to resolve it", f" (the true difference may be zero, or too small for these {images} images)"


def _before_holm(row) -> str:
    """An unsupported difference whose interval excludes 0: the interval is the pair's own, the
    verdict is adjusted for every pair compared (Holm), and a reader should not have to guess."""
    p = getattr(row, "p_holm", math.nan)
    if p is None or pd.isna(p) or not (row.diff_low > 0 or row.diff_high < 0):
        return ""
    return f", its interval excludes 0 only before Holm's adjustment across the pairs (p_holm {p:.3f})"


def _to_resolve(row, explained: set) -> str:
    """What more repeats might do (statistics.repeats_to_resolve). Said as a guess: checked on
    held-out seeds, the small numbers a few seeds give came true far less often than 4 in 5. Each
    kind of answer (a number, or why none is likely: `_never_words`) is explained after its first
    pair only, and each kind has words of its own: `explained` holds the kinds already said (the
    same words after every pair made a list hard to read)."""
    needed = getattr(row, "repeats_to_resolve", math.nan)
    if needed is None or pd.isna(needed):
        return ""
    if math.isinf(needed):
        kind, said, why = _never_words(row)
    else:
        kind, said, why = "guess", f", perhaps {int(needed)} repeats would resolve it", f" (a guess from {int(getattr(row, 'seeds', 0) or 0)} seeds, often optimistic)"
    if kind in explained:
        return said
    explained.add(kind)
    return said + why
