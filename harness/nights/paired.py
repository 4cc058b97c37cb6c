"""Tonight against an earlier run, paired on the same images: for each watched metric whose
threshold says `beyond_noise`, each model's change (tonight minus then) with the 95% interval of
`harness compare --pairs` between the two run folders (`cross_run_pairs`, each model against
itself). Where the runs cannot be paired (the earlier folder is gone, the data or the seeding
changed, the metric has no per-image basis with one seed) the note says why, and the threshold
falls back to tonight's own interval (regressions.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from harness.config.nightly_spec import ThresholdSpec
from harness.errors import ConfigError
from harness.nights.regressions import Paired


def paired_changes(earlier_dir: str | None, earlier_id: str, tonight: Path, thresholds: Mapping[str, ThresholdSpec]) -> tuple[dict[tuple[str, str], Paired], list[str]]:
    """((model, metric) -> Paired, notes on the metrics that could not be paired)."""
    watched = sorted(m for m, t in thresholds.items() if t.beyond_noise)
    if not watched:
        return {}, []
    if not earlier_dir or not Path(earlier_dir).is_dir():
        return {}, [f"not paired with {earlier_id}: its run folder {earlier_dir or '(not recorded)'} is gone; judged by tonight's interval alone"]
    from harness.outputs.cross_run import cross_run_pairs  # statistics: loaded only when a threshold asks

    found: dict[tuple[str, str], Paired] = {}
    notes = []
    for metric in watched:
        try:
            pairs = cross_run_pairs([Path(earlier_dir), tonight], metric, same_model=True).pairs
        except ConfigError as exc:
            why = "; ".join([exc.headline.removeprefix("compare --pairs: ").rstrip(":"), *exc.problems])
            notes.append(f"{metric} not paired with {earlier_id} ({why}); judged by tonight's interval alone")
            continue
        for row in pairs.itertuples(index=False):  # a is then, b tonight: tonight - then is -(a - b)
            found[(row.model_b, metric)] = Paired(-row.diff, -row.diff_high, -row.diff_low, row.covers)
    return found, notes
