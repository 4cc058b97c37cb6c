"""`harness compare RUN_DIR ...`: models side by side, across one or several runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from harness.errors import ConfigError
from harness.rundir import RunDir, beside_runs, differing_versions, given_once, runs_held, save_table_as
from harness.rundir.hardware import describe as describe_machine, several
from rich.markup import escape

from harness.config.changes import BEFORE_THEY_EXISTED, meant_when_absent
from harness.config.schema import ExperimentConfig
from harness.config.metrics import OWN_LOSS_COLUMNS, SPLIT_WORDS, has_direction, higher_is_better, is_per_class, is_timed
from harness.outputs.tables import build_member_summary, load_losses, load_summary
from harness.outputs.columns import plain_text, with_intervals
from harness.outputs.stuck import STUCK_SEEDS, stuck_models_text
from harness.outputs.terminal import TerminalTable, print_table

COLUMNS = ["run", "name", "run_id", "model", "status", "compared_on", "params", "flops_per_example", "ms_per_step",
           "latency_ms", "latency_p90_ms", "serve_images_per_s", "serve_peak_mb", "model_mb",  # what each model costs to serve
           "final_train_loss", "best_val_loss", "val_loss", "val_iou", "val_f1", "test_loss", "test_iou", "test_f1",
           # each score's 95% interval: in --csv and --json, and at the terminal beside a ranking column's value
           *(f"{split}_{score}_{side}" for split in ("val", "test") for score in ("loss", "iou", "f1") for side in ("low", "high")),
           "output_spread", STUCK_SEEDS,  # whether the output depends on the input (outputs/stuck.py)
           "kind", "loss", "repeats", "interval_covers", "machine"]  # kind, loss: what each trained on
INTERVAL_SIDES = ("_low", "_high")
FINISHED = "summary.csv"
STOPPED = "summary.csv of a run not at its end"


def compare_command(run_dirs: list[Path], as_json: bool, csv: Path | None, pairs: bool, pairs_csv: Path | None, chosen: bool = False,
                    metric: str | None = None) -> None:
    """`harness compare`: the models side by side (and the settings that differ between the runs);
    with `pairs`, the verdicts between models of different runs on `metric` (default: the runs'
    ranking column), computed (or refused, exit 2) before anything is printed."""
    table = compare_runs(run_dirs)
    found = None
    if pairs:
        from harness.outputs.cross_run import cross_run_pairs

        found = cross_run_pairs(run_dirs, metric, chosen=chosen)
    if as_json:
        models = table.to_json(orient="records")
        print(models if found is None else f'{{"models": {models}, "pairs": {found.pairs.to_json(orient="records")}, "notes": {json.dumps(found.notes)}}}')
    else:
        print_comparison(table, pairs_tested=found is not None, ranked_by=ranking_columns(run_dirs))
        if len(run_dirs) > 1:
            print_settings(run_dirs)
            if found is None and (versions := version_lines(run_dirs)):  # with --pairs, a note of the pairs says it
                print("versions that differ between these runs (a change can move every score):")
                for line in versions:
                    print(f"  {plain_text(line)}")
        if found is not None:
            print_cross_run(found)
    for frame, path, option in ((table, csv, "--csv"), (found.pairs if found is not None else None, pairs_csv, "--pairs-csv")):
        if path and frame is not None:
            save_table_as(frame, path, option)
            print(f"saved: {path}", file=sys.stderr if as_json else sys.stdout)  # stdout holds the JSON


def print_settings(run_dirs: list[Path]) -> None:
    """The settings that differ between the runs, then those some runs' harness did not have."""
    differing, not_had = setting_lines(run_dirs)
    same = "the settings every run's harness had are the same" if not_had else "the runs' settings are the same"
    print("settings that differ between these runs:" if differing else f"{same} (outside output.*, but for its select_by and export)")
    for line in differing:
        print(f"  {plain_text(line)}")
    if not_had:
        print(f"settings some of these runs' harness did not have yet ({ABSENT}: no such key in that run's config.yaml; "
              "a setting is added at a default meant to keep what harness did before it):")
        for line in not_had:
            print(f"  {plain_text(line)}")


def compare_runs(run_dirs: list[Path]) -> pd.DataFrame:
    """One row per model of each run: a finished run's summary.csv; a run without one (interrupted,
    failed, still training) compared on what it has, each member's last evaluation in losses.csv,
    and `compared_on` says so."""
    given_once(run_dirs, "compare", "each run's models are listed once")
    frames, problems = [], []
    for run_dir in run_dirs:
        run = RunDir(Path(run_dir))
        if run.summary_csv.is_file():
            frame = load_summary(run.summary_csv)
            frame["compared_on"] = _summary_of(run, frame)
        elif run.run_json.is_file() and run.losses_csv.is_file():
            frame = _so_far(run)
        elif unmerged := run.groups_not_merged():
            problems.append(f"{run_dir}: no scores at its top yet: {unmerged}")
            continue
        else:
            problems.append(run.missing() if not run.path.exists() else
                            f"{run_dir}: no summary.csv, nor run.json and losses.csv to compare on: not a run directory{runs_held(run.path) or beside_runs(run.path)}")
            continue
        frame.insert(0, "run", run.label)
        frame.insert(1, "name", run.experiment)  # the keys `runs` and `history` name a run by
        frame.insert(2, "run_id", run.run_id)
        frame["machine"] = _machines_of(run, frame["model"])
        frames.append(frame)
    if problems:
        raise ConfigError("cannot compare:", problems)
    table = pd.concat(frames, ignore_index=True)
    # With data.classes above 1, each class's own scores after the means (which class a model gets
    # wrong): in --csv and --json, and in the terminal where they fit.
    classes = [c for c in table.columns if is_per_class(c) and c.startswith(("val_", "test_"))]
    at = COLUMNS.index("test_f1") + 1
    return table[[c for c in [*COLUMNS[:at], *classes, *COLUMNS[at:]] if c in table.columns]]


def _machines_of(run: RunDir, models: pd.Series) -> pd.Series | str:
    """Where each model's timings were measured ("" when run.json does not say: an older run): the
    run's machine, or, for a run of groups on several machines, its group's."""
    machine = run.recorded_machine()
    if not several(machine):
        return describe_machine(machine) if machine else ""
    by_model = {model: describe_machine(g["hardware"]) for g in run.read_record().groups for model in g.get("models", []) if g.get("hardware")}
    return models.map(by_model).fillna("")


def _who_ran_where(table: pd.DataFrame) -> str:
    """`run on machine; ...`, or `run's a, b on machine; ...` for a run whose groups ran on several."""
    said = []
    for (run, machine), rows in table[table["machine"] != ""].groupby(["run", "machine"], sort=False):
        whole_run = len(rows) == (table["run"] == run).sum()
        said.append(f"{run} on {machine}" if whole_run else f"{run}'s {', '.join(rows['model'])} on {machine}")
    return "; ".join(said)


def machines_differ(table: pd.DataFrame) -> bool:
    if "machine" not in table:
        return False
    named = table["machine"].dropna()
    return named[named != ""].nunique() > 1


def _summary_of(run: RunDir, summary: pd.DataFrame) -> str:
    """What a summary.csv is of: a finished run; or one `harness report` wrote for a run stopped
    before its end (interrupted, failed, or resumed and training again), whose scores are from the
    step it stopped at then: its members' `steps`, which a resume since may have left behind."""
    try:
        record = run.read_record()
    except ConfigError:  # a run.json that cannot be read: the summary is all there is to go by
        return FINISHED
    if not record.stopped_short:
        return FINISHED
    said = f"{STOPPED}: {record.status} at step {record.steps_done}/{record.total_steps}"
    written_at = pd.to_numeric(summary["steps"], errors="coerce").max() if "steps" in summary else None
    return said if written_at is None or pd.isna(written_at) or written_at == record.steps_done else f"{said}, the summary of step {int(written_at)}"


def _so_far(run: RunDir) -> pd.DataFrame:
    """A run with no summary.csv yet, per member, from its rows so far."""
    record = run.read_record()
    frame = build_member_summary(load_losses(run.losses_csv, growing=True), {n: m.as_dict() for n, m in record.models.items()})
    frame["compared_on"] = f"last evaluation so far: {record.status} at step {record.steps_done}/{record.total_steps}"
    return frame


def trained_losses(table: pd.DataFrame) -> list[str]:
    """The training losses of the table's models: summary.csv's `loss` (`bce+dice`, ...), and for
    another kind than a supervised model's its kind too (a GAN's generator trains on its adversarial
    loss plus L1 whatever `loss` says; an older autoencoder run's `loss` named a mask loss it never
    read)."""
    if "loss" not in table:
        return []
    kinds = table["kind"] if "kind" in table else pd.Series([""] * len(table), index=table.index)
    named = {(loss if kind in ("", "supervised") else f"{kind}'s loss")
             for loss, kind in zip(table["loss"].fillna("").astype(str), kinds.fillna("").astype(str)) if loss}
    return sorted(named)


def best_index(table: pd.DataFrame, column: str) -> int | None:
    values = pd.to_numeric(table[column], errors="coerce")
    if values.notna().sum() < 2:
        return None
    if not has_direction(column) or (is_timed(column) and machines_differ(table)):
        return None  # no best of timings taken on different machines
    if column in OWN_LOSS_COLUMNS and len(trained_losses(table[values.notna()])) > 1:
        return None  # nor of losses that are not the same function
    return int(values.idxmax() if higher_is_better(column) else values.idxmin())


# A run with a test split ranks on it (its validation scores chose the weights): test first.
PRIORITY = ["run", "model", "test_iou", "val_iou", "status", "params", "ms_per_step", "latency_ms", "test_f1", "val_f1", "val_loss", "best_val_loss", "final_train_loss"]


def ranking_columns(run_dirs: list[Path]) -> list[str]:
    """The columns the runs ranked their models by (test_loss, val_f1, ...), each once, in the runs'
    order; a run whose config.yaml cannot be read adds none (its table row still shows)."""
    ranks = []
    for run_dir in run_dirs:
        try:
            ranks.append(RunDir(Path(run_dir)).ranking_column())
        except ConfigError:
            continue
    return list(dict.fromkeys(ranks))


def print_comparison(table: pd.DataFrame, console=None, pairs_tested: bool = False, ranked_by: list[str] | None = None) -> None:
    """Side by side, as many columns as the terminal is wide, most important first: after run and
    model (never cut) the columns the runs ranked by (`ranked_by`) and how each model ended, then
    PRIORITY's. The best of each column in bold green, a status other than ok in red."""
    from rich.console import Console

    console = console or Console()
    first = PRIORITY[:2] + [c for c in ranked_by or [] if c in table.columns] + ["status"] + PRIORITY[2:]
    first = list(dict.fromkeys(c for c in first if c in table.columns))
    order = first + [c for c in table.columns if c not in first and not c.endswith(INTERVAL_SIDES)]  # intervals: in their column's text
    best = {c: best_index(table, c) for c in order}

    def style(column: str, row: int) -> str | None:
        if best.get(column) == row:
            return "bold green"
        if column == "status" and table[column].iloc[row] != "ok":
            return "red"
        return None

    # The ranking columns with each model's own interval, as the run's ranking shows them: a best in
    # bold green whose interval overlaps the others' is read for what it is.
    texts = {c: with_intervals(table, c) for c in ranked_by or [] if c in table}
    view = TerminalTable(table, order, identifiers=("run", "model"), headers={c: c for c in order}, style=style, texts=texts)
    print_table(view, lambda shown, total: f"harness compare: best of each column in bold green ({shown} of {total} columns; --csv or --json for all)", console)
    console.print(escape(comparison_note(table, pairs_tested)))


def comparison_note(table: pd.DataFrame, pairs_tested: bool = False) -> str:
    """What bold green does not mean: the table lines up numbers, it tests no difference between
    runs (`--pairs` does, below it); and with one training seed a run's own intervals cover
    image noise only (of its test images, or without a test split its validation images)."""
    repeats = pd.to_numeric(table["repeats"], errors="coerce").fillna(1) if "repeats" in table else pd.Series([1] * len(table))
    note = ("Bold green marks the best number of a column; the table tests nothing, the pairs below do."
            if pairs_tested else
            "Bold green marks the best number of a column; no difference between runs is tested here, none is called supported "
            "(--pairs tests them, for runs scored on the same images).")
    # An unfinished run has no repeats column yet and no intervals at all (said below), whatever its seeds.
    compared_on = table["compared_on"] if "compared_on" in table else pd.Series([FINISHED] * len(table))
    stopped_run = compared_on.str.startswith(STOPPED).to_numpy()
    finished_run = (compared_on == FINISHED).to_numpy() | stopped_run  # a summary.csv: intervals, repeats
    one_seed = (repeats.to_numpy() <= 1) & finished_run
    if one_seed.any():
        note += (f" Runs with one training seed measured no training randomness (their intervals cover {_images_noise(table[one_seed])} "
                 f"only): train with train.repeats: 3 or more{'' if pairs_tested else ', in one run,'} for verdicts about models.")
    if len(losses := trained_losses(table)) > 1:
        note += (f" The models trained on different losses ({', '.join(losses)}): a column of each one's own loss (val_loss, "
                 "best_val_loss, ...) compares different functions, so no best is marked there; compare them on a score (val_iou, ...), or "
                 "within one run on its summary.csv's val_compare_loss.")
    if machines_differ(table):
        note += (f" The models were timed on different machines ({_who_ran_where(table)}): their timings (ms/step, and in summary.csv "
                 "latency and serving throughput) measure the machines as much as the models, so no best is marked among them; "
                 "compare timings between models timed on one machine.")
    unfinished = sorted(set(table.loc[~finished_run, "run"]))
    if unfinished:
        note += (f" Not finished, compared on each member's last evaluation so far (per member, no intervals): {', '.join(unfinished)}"
                 " (see compared_on).")
    stopped = sorted(set(table.loc[stopped_run, "run"]))
    if stopped:
        note += f" Not at their end, compared on the summary.csv harness report wrote when they stopped (see compared_on): {', '.join(stopped)}."
    note += f" {stuck_models_text(table, under='run')}".rstrip()  # each stuck model under the run it is in
    return note


def _images_noise(one_seed: pd.DataFrame) -> str:
    """Whose noise one-seed runs' intervals cover: the images each run ranks on (its
    `interval_covers`: test images with a test split, else validation images)."""
    covers = one_seed["interval_covers"].dropna().astype(str) if "interval_covers" in one_seed else pd.Series(dtype=str)
    order = list(SPLIT_WORDS.values())
    splits = sorted({c.split(" images")[0] for c in covers} & set(order), key=order.index)
    return f"{' or '.join(f'{split}-image' for split in splits)} noise" if splits else "image noise"


# The output.* settings that change what a score column holds: which weights the test split scored
# (the best on validation, or the last: no exports means no best state on disk). The rest of
# output.* (where files go, which plots, probes) changes no score.
SCORING_OUTPUT = ("select_by", "export")


def setting_lines(run_dirs: list[Path]) -> tuple[list[str], list[str]]:
    """Two lists of `key.path: run_a = x, run_b = y`, read from each run's config.yaml (no code it
    names imported), outside output.* but for SCORING_OUTPUT: the settings not the same in all the runs;
    then those some runs' config.yaml has no key for (`-` there) where the others hold its default:
    added to harness after those runs were made, at a default meant to keep what it did before
    (config/changes.py), listed apart so that an upgrade's new keys do not bury a real change."""
    import yaml

    flat, models = {}, {}
    for run_dir in run_dirs:
        try:
            raw = yaml.safe_load((Path(run_dir) / "config.yaml").read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError):
            raw = {}
        output = raw.pop("output", None)
        if isinstance(output, dict):
            raw["output"] = {key: output[key] for key in SCORING_OUTPUT if key in output}
        label = RunDir(Path(run_dir)).label
        flat[label], models[label] = dict(_flatten(raw)), _models_by_name(raw)
    # A model in some runs only is one line (what it is, or `-` where absent), not one per setting.
    partial = sorted(name for name in set().union(*models.values()) if not all(name in held for held in models.values()))
    settings = {f"models.{name}": {label: _what_model(held.get(name)) for label, held in models.items()} for name in partial}
    for key in sorted(set().union(*flat.values())):
        if not any(key.startswith(f"models.{name}.") for name in partial):
            settings[key] = {label: values.get(key, ABSENT) for label, values in flat.items()}
    _section_against_leaf(settings, flat)
    differing = {key: values for key, values in sorted(settings.items()) if len({repr(v) for v in values.values()}) > 1}
    in_every = set.intersection(*(set(held) for held in models.values()))
    not_had = {key: values for key, values in differing.items() if _not_had(key, values, flat, in_every)}
    for key in set(differing) & set(BEFORE_THEY_EXISTED) - set(not_had):  # `-` says what such a run did
        differing[key] = {label: f"{ABSENT} (then {BEFORE_THEY_EXISTED[key](flat[label])})" if key not in flat[label] else value
                          for label, value in differing[key].items()}
    return tuple([f"{key}{took}: " + ", ".join(f"{label} = {value}" for label, value in values.items())
                  for key, (values, took) in _said_with_train(chosen, in_every).items()]
                 for chosen in ({k: v for k, v in differing.items() if k not in not_had}, not_had))


ABSENT = "-"  # a setting's value where a run's config.yaml has no such key


def _section_against_leaf(settings: dict[str, dict], flat: dict[str, dict]) -> None:
    """A section set in some runs and a leaf in others (`train.race: null` against its rungs, keep
    and metric) becomes one line, each run's whole section beside the other's value: listed setting
    by setting it read `train.race: a = -, b = None` and `train.race.keep: a = 0.6, b = -`, as if
    neither run had a race."""
    leaves = {key for held in flat.values() for key in held}
    for key in sorted(leaves, key=len):
        inside = f"{key}."
        if key not in settings or not any(other.startswith(inside) for other in settings):
            continue
        settings[key] = {label: held[key] if key in held else _section_text(held, inside) for label, held in flat.items()}
        for other in [other for other in settings if other.startswith(inside)]:
            del settings[other]


def _section_text(held: dict, inside: str) -> str:
    """A run's section under `inside` as one flow mapping (`{rungs: [1, 3], keep: 0.6}`), `-` where it has none."""
    parts = [f"{key[len(inside):]}: {value}" for key, value in held.items() if key.startswith(inside)]
    return "{" + ", ".join(parts) + "}" if parts else ABSENT


def _not_had(key: str, values: dict, flat: dict[str, dict], model_names: set[str]) -> bool:
    """Whether `key` is a setting the runs without it did not have, left by the runs with it at
    what those runs did (its default, or its value before it existed: config/changes.py): they
    agree on that value (a model in some runs only, `models.<name>`, is no run's key), and a run
    without it has no other key on its path (`train.race: null` against `train.race.rungs`: a
    section set in one run only is a change)."""
    present = [v for label, v in values.items() if key in flat[label]]
    if not present or any(v != present[0] for v in present):
        return False
    for label, held in flat.items():
        if key not in held and any(other.startswith(f"{key}.") or key.startswith(f"{other}.") for other in held):
            return False
    name, setting = _model_setting(key, model_names)
    parts = ("models", *setting.split(".")) if name is not None else tuple(key.split("."))
    return all(present[0] == meant_when_absent(ExperimentConfig, parts, held) for held in flat.values() if key not in held)


def _model_setting(key: str, names: set[str]) -> tuple[str | None, str]:
    """The model entry a flattened key is a setting of, and the setting (`models.unet.b.arch`:
    `unet.b`, `arch`); (None, key) outside the entries. A name may hold dots: the longest name that
    prefixes the key is its model."""
    name = next((n for n in sorted(names, key=len, reverse=True) if key.startswith(f"models.{n}.")), None)
    return (name, key[len(f"models.{name}."):]) if name is not None else (None, key)


def _said_with_train(differing: dict[str, dict], names: set[str]) -> dict[str, tuple[dict, str]]:
    """Each differing setting with what its line adds after the key: a model entry's setting that
    differs exactly as train's does (`--set train.optimizer.learning_rate=...`, which config.yaml
    copies into every entry that did not set its own) is said once, on train's line, with the
    models that took it ("every model's too"), not once more per model. `names`: the models in
    every run (`_model_setting`)."""
    took: dict[str, list[str]] = {}
    kept = {}
    for key, values in differing.items():
        name, setting = _model_setting(key, names)
        default = f"train.{setting}" if name is not None else None
        if default is not None and differing.get(default) == values:
            took.setdefault(default, []).append(name)
        else:
            kept[key] = values
    out = {}
    for key, values in kept.items():
        models = took.get(key, [])
        said = "" if not models else " (every model's too)" if len(models) == len(names) else f" ({', '.join(sorted(models))} took it too)"
        out[key] = (values, said)
    return out


def version_lines(run_dirs: list[Path]) -> list[str]:
    """`tensorflow: run_a = x, run_b = y` for each package the runs' run.json record at more than
    one version (a run whose run.json cannot be read is left out)."""
    recorded = {}
    for run_dir in run_dirs:
        run = RunDir(Path(run_dir))
        try:
            recorded[run.label] = run.read_record().versions or {}
        except ConfigError:
            continue
    return [f"{package}: " + ", ".join(f"{label} = {version}" for label, version in held.items())
            for package, held in differing_versions(recorded).items()]


def _models_by_name(raw: dict) -> dict[str, dict]:
    listed = raw.get("models")
    return {item["name"]: item for item in listed if isinstance(item, dict) and "name" in item} if isinstance(listed, list) else {}


def _what_model(item: dict | None) -> str:
    """`-` for a model a run does not have; else its architecture, after its kind when not supervised."""
    if item is None:
        return "-"
    kind = None if item.get("kind") == "supervised" else item.get("kind")
    return " ".join(str(part) for part in (kind, item.get("arch")) if part) or "present"


def _flatten(node, prefix: str = ""):
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _flatten(value, f"{prefix}{key}.")
    elif isinstance(node, list) and node and all(isinstance(item, dict) and "name" in item for item in node):
        for item in node:  # models: keyed by name, so the same model's settings line up across runs
            yield from _flatten(item, f"{prefix}{item['name']}.")
    else:
        yield prefix.rstrip("."), node


PAIR_PRIORITY = ["model_a", "model_b", "difference", "verdict", "p_holm", "p_a_better", "seeds_a_better", "seeds_b_better", "repeats_to_resolve"]


def print_cross_run(found, console=None) -> None:
    """The pairs across runs, a row each (the difference a minus b with its interval, and whether
    it is supported, or with one seed beyond image noise), then the verdict in words and the notes.
    Each run is numbered (`unet [2]`): run labels are too long for a row and a sentence."""
    from rich.console import Console

    from harness.outputs.verdict_text import pair_word, signed_interval, verdict

    console = console or Console()
    pairs = found.pairs
    if pairs.empty:
        console.print("No pair across these runs has scores on both sides.")
        return
    number = {label: i + 1 for i, label in enumerate(dict.fromkeys([*pairs["run_a"], *pairs["run_b"]]))}
    console.print(escape("runs: " + ", ".join(f"[{i}] {label}" for label, i in number.items())))
    short = pairs.assign(model_a=[f"{m} [{number[r]}]" for r, m in zip(pairs["run_a"], pairs["model_a"])],
                         model_b=[f"{m} [{number[r]}]" for r, m in zip(pairs["run_b"], pairs["model_b"])])
    texts = {
        "difference": [signed_interval(d, lo, hi) for d, lo, hi in zip(pairs["diff"], pairs["diff_low"], pairs["diff_high"])],
        "verdict": [pair_word(row) for row in pairs.itertuples(index=False)],
    }
    view = TerminalTable(short, PAIR_PRIORITY, identifiers=("model_a", "model_b"), texts=texts,
                         headers={"difference": f"{found.rank} a - b [95%]", "verdict": "verdict", "model_a": "a", "model_b": "b"})
    print_table(view, lambda shown, total: f"harness compare --pairs: models of different runs, on the same images ({shown} of {total} columns)", console)
    for text in [verdict(short, found.rank, table="--pairs-csv"), *found.notes]:
        console.print(escape(text))


