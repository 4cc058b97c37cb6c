"""Bench section `calibration`: are the ranking's intervals right about how sure they are?

Four small models of close quality are trained with many training seeds at once (`train.repeats`,
data held fixed). Then, for R = 1, 3 and 5, many subsets of R seeds play "the run a user made",
and the seeds left out play "the truth": the mean over them of each pair's per-seed difference,
on the same validation images. For each subset and pair, the harness's own statistics
(`bootstrap_metric` with one seed, `across_seeds` with repeats) give an interval and a verdict:

- coverage: the share of 95% intervals that contain the held-out seeds' mean difference (that
  mean is itself noisy: `ideal_coverage` is what an exactly calibrated Student-t interval of the
  seed part would reach against it, P(|T_{R-1}| < t_crit / sqrt(1 + R/m)) for m held-out seeds);
- supported: the share of pairs called supported; false claims: supported with the sign opposite
  to the held-out mean. With one seed the image-only interval is reported too (`image_only_*`):
  what calling its exclusion of zero "supported" would claim;
- with repeats, equivalence (`output.equivalence_margin` at EQUIVALENCE_MARGIN): the share of
  pairs called equivalent, and false equivalence: called so where the held-out seeds' mean
  difference is the margin or more (two one-sided tests at 5% promise no more than 5% of pairs
  whose true difference is at the margin);
- with repeats, `repeats_to_resolve` taken at its word: a pair left unsupported, predicted to be
  resolved by r repeats (r no more than the seeds held out), is asked of r held-out seeds
  (`resolved_as_predicted`, against the 80% it promises);
- across two runs (`across_runs_row`): `harness compare --pairs` between two runs of R other
  seeds each, the same judgement, and `harness nightly`'s `beyond_noise` on two nights of the
  same model (false alarms) and on drops the held-out seeds confirm (found).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from harness.config.naming import member_name, model_of, repeat_of
from harness.outputs.statistics import CONFIDENCE, across_seeds, bootstrap_metric, image_draws, mark_equivalence
from harness.outputs.uncertainty import last_evaluations

METRIC = "iou"
NIGHTLY_DROP = 0.02  # IoU: the default nightly threshold of val_iou
EQUIVALENCE_MARGIN = 0.05  # IoU: between the task's true differences (0.001-0.075 over 16 seeds), so both kinds occur

# Close in quality on purpose: the pairs a user would want told apart.
CALIBRATION_MODELS = [
    {"name": "fcn16", "arch": "tiny_fcn", "options": {"width": 16}},
    {"name": "deconv16", "arch": "tiny_deconv", "options": {"width": 16}},
    {"name": "deconv8", "arch": "tiny_deconv", "options": {"width": 8}},
    {"name": "unet4", "arch": "tiny_unet", "options": {"width": 4}},
]


def calibration_config(seeds: int, steps: int, side: int, train_size: int, val_size: int, models: list[dict], bootstrap_train: bool = False) -> dict:
    return {
        "name": "calibration", "seed": 0,
        "data": {"image_size": [side, side], "train_size": train_size, "val_size": val_size, "batch_size": 16, "bootstrap_train": bootstrap_train},
        "models": models,
        "train": {"steps": steps, "steps_per_call": 16, "repeats": seeds, "batchnorm_momentum": 0.9},
        "output": {"probe_steps": 0, "progress": "none", "tensorboard": False, "sample_images": 0, "export": False},
    }


def bench_calibration(folder: Path, seeds: int = 16, steps: int = 256, side: int = 32, train_size: int = 512, val_size: int = 256,
                      models: list[dict] | None = None, sizes: tuple[int, ...] = (1, 3, 5), subsets: int = 60, resamples: int = 500,
                      bootstrap_train: bool = False) -> pd.DataFrame:
    """`bootstrap_train`: every seed trains on its own bootstrap of the training set (section
    `calibration_bootstrap`), so the seeds vary the data sampled as well."""
    from harness.api import run
    from harness.config.loading import validate_config

    config = validate_config(calibration_config(seeds, steps, side, train_size, val_size, models or CALIBRATION_MODELS, bootstrap_train))
    began = time.perf_counter()
    result = run(config, results_dir=folder / "calibration-runs")
    train_s = time.perf_counter() - began
    scored = last_evaluations(result.run_dir / "val_scores.csv", config.data.classes)
    rows = [calibration_row(scored, size, seeds, subsets, resamples) for size in sizes if size < seeds]
    rows += [across_runs_row(scored, size, seeds, subsets, resamples) for size in sizes if 1 < size and 2 * size < seeds]
    table = pd.DataFrame(rows)
    table.insert(0, "section", "calibration_bootstrap" if bootstrap_train else "calibration")
    table.insert(1, "contender", [f"{'across two runs, ' if row.get('across_runs') else ''}R = {row['repeats']}" for row in rows])
    table["seeds_trained"] = seeds
    table["pair_seed_std"] = pair_seed_spread(per_seed_values(scored))
    table["train_s"] = round(train_s, 1)
    return table


def calibration_row(scored: dict, size: int, seeds: int, subsets: int, resamples: int, seed: int = 0) -> dict:
    """Coverage and claims of R = `size` intervals against the held-out seeds, over `subsets`
    random subsets of the trained seeds; with R > 1, also whether `repeats_to_resolve` holds."""
    models = list(dict.fromkeys(model_of(n) for n in scored))
    per_seed = per_seed_values(scored)
    rng, check_rng = np.random.default_rng(seed), np.random.default_rng(seed + 1)
    outcomes, checks, nevers = [], [], []
    for _ in range(subsets):
        chosen = sorted(rng.choice(np.arange(1, seeds + 1), size, replace=False).tolist())
        held_out = [r for r in range(1, seeds + 1) if r not in chosen]
        pairs = _subset_pairs(scored, per_seed, chosen, size, resamples)
        outcomes += _judge(mark_equivalence(pairs, EQUIVALENCE_MARGIN) if size > 1 else pairs, _held_out_differences(per_seed, held_out))
        if size > 1:
            checks += _resolve_checks(scored, per_seed, pairs, held_out, check_rng, resamples)
            nevers += _never_checks(scored, per_seed, pairs, held_out, resamples)
    frame = pd.DataFrame(outcomes)
    m = seeds - size
    row = {
        "repeats": size, "held_out_seeds": m, "subsets": subsets, "intervals": len(frame),
        "models": len(models), "coverage": round(frame["covered"].mean(), 3),
        "ideal_coverage": round(ideal_coverage(size, m), 3) if size > 1 else math.nan,
        "supported": round(frame["supported"].mean(), 3),
        "false_claims": round(frame["false_claim"].mean(), 3),
        "false_share_of_supported": round(frame.loc[frame["supported"], "false_claim"].mean(), 3) if frame["supported"].any() else 0.0,
    }
    if size == 1:
        row["image_only_supported"] = round(frame["beyond_image_noise"].mean(), 3)
        row["image_only_false_claims"] = round(frame["image_only_false_claim"].mean(), 3)
    else:
        checked = pd.DataFrame(checks, columns=["predicted", "checked", "resolved"])
        within = checked[checked["checked"]]
        row["unsupported_pairs"] = len(checked)
        row["prediction_checked"] = len(within)  # its predicted repeats no more than the seeds held out
        row["median_predicted_repeats"] = float(within["predicted"].median()) if len(within) else math.nan
        row["resolved_as_predicted"] = round(float(within["resolved"].mean()), 3) if len(within) else math.nan  # the claim: 0.8
        row.update(_never_columns(pd.DataFrame(nevers, columns=["limit", "resolved"])))
        row["equivalence_margin"] = EQUIVALENCE_MARGIN
        row["equivalent"] = round(frame["equivalent"].mean(), 3)
        row["false_equivalence"] = round(frame["false_equivalence"].mean(), 3)  # of all pairs
        row["truly_at_or_over_margin"] = round(frame["truly_at_or_over_margin"].mean(), 3)
    return row


def across_runs_row(scored: dict, size: int, seeds: int, subsets: int, resamples: int, seed: int = 0) -> dict:
    """`compare --pairs` over two runs of R = `size` seeds each, trained with different seeds:
    each subset draws 2R seeds, the first R play run 1 (every model), the next R run 2, paired
    by position as the command pairs repeats; every model of run 1 is compared with every model
    of run 2 (Holm over those pairs), and the seeds drawn by neither play the truth. A model
    against itself in the other run has a true difference of 0: any support is a false claim.
    Run 1 also plays an earlier night and run 2 tonight, for `harness nightly`'s `beyond_noise`."""
    per_seed = per_seed_values(scored)
    rng = np.random.default_rng(seed)
    outcomes = []
    for _ in range(subsets):
        drawn = rng.choice(np.arange(1, seeds + 1), 2 * size, replace=False).tolist()
        two_runs = _as_two_runs(per_seed, drawn[:size], drawn[size:])
        draws = image_draws({n: scored[n] for n in two_runs["member"]}, METRIC, resamples=resamples)
        per_model, pairs = across_seeds(two_runs, f"val_{METRIC}", draws, compared=lambda a, b: a[0] != b[0])
        truth = per_seed[~per_seed["repeat"].isin(drawn)].groupby("model")["value"].mean()
        true_diff = {(a, b): float(truth[_model(a)] - truth[_model(b)]) for a, b in zip(pairs["model_a"], pairs["model_b"])}
        for judged, row in zip(_judge(pairs, true_diff), pairs.itertuples(index=False)):
            outcomes.append({**judged, "same_model": _model(row.model_a) == _model(row.model_b), "true_drop": true_diff[(row.model_a, row.model_b)],
                             **_nightly_alarms(row, per_model.set_index("model"))})
    found = pd.DataFrame(outcomes)
    same, dropped = found[found["same_model"]], found[found["true_drop"] > NIGHTLY_DROP]
    m = seeds - 2 * size

    def share(frame: pd.DataFrame, column: str) -> float:
        return round(float(frame[column].mean()), 3) if len(frame) else math.nan

    return {
        "repeats": size, "across_runs": True, "held_out_seeds": m, "subsets": subsets, "intervals": len(found), "models": per_seed["model"].nunique(),
        "coverage": share(found, "covered"), "ideal_coverage": round(ideal_coverage(size, m), 3),
        "supported": share(found, "supported"), "false_claims": share(found, "false_claim"),
        "false_share_of_supported": share(found[found["supported"]], "false_claim") if found["supported"].any() else 0.0,
        "same_model_supported": share(same, "supported"),
        # `harness nightly` on two nights of the same code, threshold 0, beyond_noise: alarms (all false) ...
        "nightly_alarms_paired": share(same, "paired"), "nightly_alarms_tonight_only": share(same, "tonight_only"),
        # ... and where tonight's model is truly worse by more than NIGHTLY_DROP (held-out seeds): found how often
        "nightly_drops": len(dropped),
        "nightly_drops_found_paired": share(dropped, "paired"), "nightly_drops_found_tonight_only": share(dropped, "tonight_only"),
    }


def _as_two_runs(per_seed: pd.DataFrame, first: list[int], second: list[int]) -> pd.DataFrame:
    """The per-seed table of two runs: run 1 holds every model's seeds `first`, run 2 its seeds
    `second`, each renumbered 1..R; models are named `1:<model>` and `2:<model>`."""
    return pd.concat([per_seed[per_seed["repeat"] == r].assign(model=lambda f, k=k: k + ":" + f["model"], repeat=i + 1)
                      for k, chosen in (("1", first), ("2", second)) for i, r in enumerate(chosen)], ignore_index=True)


def _model(name: str) -> str:
    return name.split(":", 1)[1]


def _nightly_alarms(pair, per_model: pd.DataFrame) -> dict:
    """Run 1's model_a as the earlier night, run 2's model_b as tonight, IoU: would `beyond_noise`
    call tonight's drop a regression, paired (diff = then - tonight, its interval above 0) or by
    tonight's interval alone (the earlier mean above it)?"""
    return {"paired": bool(pair.diff_low > 0), "tonight_only": bool(per_model.loc[pair.model_a, "mean"] > per_model.loc[pair.model_b, "high"])}


def per_seed_values(scored: dict, images: np.ndarray | None = None) -> pd.DataFrame:
    """Each member's METRIC (model, repeat, member, value), on every image or on `images` only."""
    return pd.DataFrame([{"model": model_of(n), "repeat": repeat_of(n), "member": n, "value": score_on(s, images)} for n, s in scored.items()])


def score_on(member, images: np.ndarray | None = None) -> float:
    """A member's METRIC on `images` (default: all), from its per-image quantities."""
    quantities = member.quantities if images is None else {k: v[images] for k, v in member.quantities.items()}
    count = len(quantities["loss"])
    return float(member.scores({k: v.sum(0) for k, v in quantities.items()}, count)[METRIC])


def pair_seed_spread(per_seed: pd.DataFrame) -> float:
    """The median over pairs of the standard deviation, across all the seeds trained, of the pair's
    per-seed difference: how far training randomness moves a difference."""
    spreads = [float(d.std(ddof=1)) for d in _pair_differences(per_seed).values()]
    return round(float(np.median(spreads)), 4) if spreads else math.nan


def _held_out_differences(per_seed: pd.DataFrame, held_out: list[int]) -> dict[tuple[str, str], float]:
    return {pair: float(d.mean()) for pair, d in _pair_differences(per_seed, held_out).items()}


def _pair_differences(per_seed: pd.DataFrame, repeats: list[int] | None = None) -> dict[tuple[str, str], pd.Series]:
    """Each pair's per-seed difference (a - b), over `repeats` (default: every seed)."""
    rows = per_seed if repeats is None else per_seed[per_seed["repeat"].isin(repeats)]
    table = rows.pivot_table(index="repeat", columns="model", values="value")
    models = list(dict.fromkeys(per_seed["model"]))
    return {(a, b): table[a] - table[b] for i, a in enumerate(models) for b in models[i + 1:]}


def _subset_pairs(scored: dict, per_seed: pd.DataFrame, chosen: list[int], size: int, resamples: int) -> pd.DataFrame:
    """The pairs table a run of the `chosen` seeds reports."""
    models = list(dict.fromkeys(per_seed["model"]))
    if size == 1:
        one = {m: scored[member_name(m, chosen[0], max(per_seed["repeat"]))] for m in models}
        return bootstrap_metric(one, METRIC, resamples=resamples)[1]
    subset = per_seed[per_seed["repeat"].isin(chosen)]
    draws = image_draws({n: scored[n] for n in subset["member"]}, METRIC, resamples=resamples)
    return across_seeds(subset, f"val_{METRIC}", draws)[1]


def _judge(pairs: pd.DataFrame, truth: dict) -> list[dict]:
    """One subset: each pair's interval and verdict, and whether they hold against the held-out truth."""
    out = []
    for row in pairs.itertuples(index=False):
        target = truth[(row.model_a, row.model_b)]
        wrong_sign = np.sign(row.diff) != np.sign(target)
        out.append({
            "covered": bool(row.diff_low <= target <= row.diff_high),
            "supported": bool(row.supported),
            "false_claim": bool(row.supported and wrong_sign),
            "beyond_image_noise": bool(getattr(row, "beyond_image_noise", False)),
            "image_only_false_claim": bool(getattr(row, "beyond_image_noise", False) and wrong_sign),
            "equivalent": bool(getattr(row, "equivalent", False)),
            "false_equivalence": bool(getattr(row, "equivalent", False) and abs(target) >= EQUIVALENCE_MARGIN),
            "truly_at_or_over_margin": bool(abs(target) >= EQUIVALENCE_MARGIN),
        })
    return out


def _resolve_checks(scored: dict, per_seed: pd.DataFrame, pairs: pd.DataFrame, held_out: list[int], rng, resamples: int) -> list[dict]:
    """`repeats_to_resolve` taken at its word: for each pair the subset did not support, r of the
    held-out seeds (r its prediction, when that many were held out), drawn at random, play the run
    of r repeats the user would make next; resolved when that run supports the pair with the same
    sign. The prediction says 4 times in 5."""
    checks, again = [], {}
    for row in pairs.itertuples(index=False):
        predicted = float(row.repeats_to_resolve)
        if row.supported:
            continue
        if not math.isfinite(predicted) or predicted > len(held_out):
            checks.append({"predicted": predicted, "checked": False, "resolved": False})
            continue
        r = int(predicted)
        if r not in again:  # one rerun of r seeds per subset serves every pair predicted at r
            again[r] = _subset_pairs(scored, per_seed, sorted(rng.choice(held_out, r, replace=False).tolist()), r, resamples)
        rerun = again[r].set_index(["model_a", "model_b"])
        checks.append({"predicted": predicted, "checked": True, "resolved": _resolved(rerun, row)})
    return checks


def _never_checks(scored: dict, per_seed: pd.DataFrame, pairs: pd.DataFrame, held_out: list[int], resamples: int) -> list[dict]:
    """"No number of repeats is likely to resolve it" taken at its word: each pair the subset left
    unsupported with `repeats_to_resolve` inf is asked of a run of every held-out seed (the most
    repeats this task can check), with the reason the verdict gave (`resolve_limit`); resolved when
    that run supports the pair with the same sign. The `images` kind's words say less than 1 in
    5 for the difference as measured; the `seeds` kind's, that more seeds would tell."""
    never = [row for row in pairs.itertuples(index=False) if not row.supported and math.isinf(row.repeats_to_resolve)]
    if not never or len(held_out) < 2:  # one seed supports nothing: no check
        return []
    rerun = _subset_pairs(scored, per_seed, held_out, len(held_out), resamples).set_index(["model_a", "model_b"])
    return [{"limit": row.resolve_limit, "resolved": _resolved(rerun, row)} for row in never]


def _resolved(rerun: pd.DataFrame, row) -> bool:
    """Whether a rerun (its pairs indexed by model_a, model_b) supports `row`'s pair with its sign."""
    again = rerun.loc[(row.model_a, row.model_b)]
    return bool(again["supported"] and np.sign(again["diff"]) == np.sign(row.diff))


def _never_columns(nevers: pd.DataFrame) -> dict:
    """Per reason a never-verdict gave: how many pairs got it, and the share a run of every held-out seed resolved."""
    out = {}
    for limit in ("images", "seeds"):
        given = nevers[nevers["limit"] == limit]
        out[f"never_{limit}"] = len(given)
        out[f"never_{limit}_resolved"] = round(float(given["resolved"].mean()), 3) if len(given) else math.nan
    return out


def ideal_coverage(size: int, held_out: int) -> float:
    """What an exactly calibrated t-interval of R seeds covers of the mean of m other seeds."""
    critical = stats.t.ppf(0.5 + CONFIDENCE / 2, size - 1)
    return float(2 * stats.t.cdf(critical / math.sqrt(1 + size / held_out), size - 1) - 1)
