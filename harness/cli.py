"""The `harness` command line: parses arguments, calls the library, maps errors to exit codes."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from harness.errors import EXIT_OK, EXIT_STOPPED_AT_ONCE, EXIT_USAGE, ConfigError, HarnessError, disk_full, not_permitted, report_bug, report_user_code, user_traceback
from harness.leaving import leave
from harness.outputs import pool
from harness.outputs.stdout import ReaderMayLeave


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    if hint := _set_hint(sys.argv[1:] if argv is None else argv):
        print(f"harness: {hint}", file=sys.stderr)
        return EXIT_USAGE
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help()
        return EXIT_USAGE
    try:
        return args.func(args) or EXIT_OK
    except KeyboardInterrupt:
        print("harness: interrupted", file=sys.stderr)
        return EXIT_STOPPED_AT_ONCE
    except Exception as exc:  # the user's code (a factory, a kind) raising is theirs; anything else is a bug
        frames = user_traceback(exc)
        if said := _said_plainly(exc, frames):
            print(f"harness: {said.render()}", file=sys.stderr)
            return said.exit_code
        if frames:
            return report_user_code(exc, frames)
        return report_bug()


def _said_plainly(exc: Exception, user_frames: list[str]) -> HarnessError | None:
    """The message instead of a traceback: harness's own, a full disk, or a path this user may not
    use (unless the user's own code met it: then their traceback says more)."""
    if isinstance(exc, HarnessError):
        return exc
    return disk_full(exc) or (None if user_frames else not_permitted(exc))


def _set_hint(argv: list[str]) -> str | None:
    """`--set train.epochs 3` (a space for the '='), or `--set a=1 b=2` (one --set for two):
    argparse would only say "unrecognized arguments: 3"; say what was meant."""
    for i, word in enumerate(argv[:-1]):
        following, after = argv[i + 1], argv[i + 2] if i + 2 < len(argv) else None
        if word != "--set" or after is None or after.startswith("-"):
            continue
        if "=" not in following:
            return f"--set takes KEY=VALUE as one word: did you mean --set {following}={after} ?"
        if OVERRIDE.match(after):
            more = [w for w in argv[i + 2:] if OVERRIDE.match(w)]
            return f"each override takes its own --set: did you mean {' '.join(f'--set {w}' for w in [following, *more])} ?"
    return None


OVERRIDE = re.compile(r"^[A-Za-z_][\w.]*=")  # KEY.PATH=VALUE


def command() -> None:
    """The `harness` command (and `python -m harness`): main(), then out at once (leaving.leave)."""
    sys.stdout, sys.stderr = ReaderMayLeave(sys.stdout), ReaderMayLeave(sys.stderr)  # `| head -1`: the command finishes, with its own code
    leave(main())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="harness", description="Train several models together, on the same batches, in one compiled TensorFlow step.")
    from harness import __version__

    parser.add_argument("--version", action="version", version=f"harness {__version__}", help="print the installed version and exit")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    for add in (_add_run, _add_plan, _add_resume, _add_workers, _add_compare, _add_runs, _add_report, _add_bench, _add_nightly, _add_history, _add_sample_data, _add_models):
        add(commands)
    for name, command in commands.choices.items():  # `harness COMMAND --help` ends with examples
        command.epilog = "examples:\n" + "\n".join(f"  {line}" for line in EXAMPLES[name])
        command.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser


EXAMPLES = {
    "run": [
        "harness run experiments/smoke.yaml",
        "harness run experiments/quickstart.yaml --set train.epochs=2 --set models.unet.backbone=resnet34",
        "harness run experiments/race.yaml --set train.race=null     # the full run, without the race",
        "harness run my.yaml --results /data/results                # results outside the checkout",
    ],
    "plan": [
        "harness plan experiments/grid.yaml",
        "harness plan experiments/grid.yaml --set placement.memory_budget_mb=20000",
    ],
    "resume": [
        "harness resume results/smoke/20261122-214712",
        "harness resume results/smoke/20261122-214712 --set placement.strategy=one_device",
    ],
    "workers": ["harness workers 2 experiments/smoke.yaml --set train.epochs=1"],
    "compare": [
        "harness compare results/smoke/20261121-220000 results/smoke/20261122-220000",
        "harness compare results/smoke/* --csv compared.csv",
        "harness compare results/seg/20261121-220000 results/seg/20261124-220000 --pairs   # verdicts across runs on the same images",
        "harness compare results/smoke/20261122-220000 --json | jq '.[0]'",
    ],
    "runs": ["harness runs", "harness runs smoke --results /data/results", "harness runs --json"],
    "report": ["harness report results/smoke/20261122-214712"],
    "export-batches": [
        "harness export-batches results/smoke/20261124-011616 --steps 16   # then docs/reproduce.md's loop",
    ],
    "doctor": [
        "harness doctor            # everything, a tiny fused step on each placement too (about a minute)",
        "harness doctor --quick    # versions, devices, XLA, mixed precision, determinism only",
    ],
    "bench": [
        "harness bench --tiny                      # a few minutes: checks every section works",
        "harness bench --section loop --rounds 7    # one section: the fused step against the hand loop",
        "harness bench --suite quickstart --processes 3",
    ],
    "nightly": [
        "harness nightly experiments/smoke.yaml                 # from cron: exit 6 on a regression",
        "harness nightly experiments/smoke.yaml --night 2026-11-21",
    ],
    "history": [
        "harness history smoke",
        "harness history smoke --metric val_iou --csv history.csv",
        "harness history smoke --pin 20261121-220000",
    ],
    "sample-data": ["harness sample-data data/sample", "harness run experiments/real_images.yaml"],
    "models": ["harness models"],
}


def _add_overrides(parser, what: str = "override a config value, e.g. --set train.epochs=3 --set models.unet.backbone=resnet34") -> None:
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE", help=what)


def _add_results(parser, default: Path | None = None, said: str = "output.results_dir") -> None:
    parser.add_argument("--results", "--results-dir", dest="results", type=Path, default=default, metavar="DIR",  # the config key's spelling too
                        help=f"results folder (default: {said})")


def _add_run(commands) -> None:
    run = commands.add_parser("run", help="train every model of an experiment and write a run directory")
    run.add_argument("config", type=Path, help="experiment YAML file")
    _add_overrides(run)
    _add_results(run)
    run.set_defaults(func=cmd_run)


def _add_plan(commands) -> None:
    plan = commands.add_parser(
        "plan", help="no training: each model's params, FLOPs and measured step memory, and the groups the models are packed into"
    )
    plan.add_argument("config", type=Path, help="experiment YAML file")
    _add_overrides(plan, "override a config value, e.g. --set placement.memory_budget_mb=20000")
    _add_results(plan)
    plan.set_defaults(func=cmd_plan)


def _add_resume(commands) -> None:
    resume = commands.add_parser("resume", help="continue an interrupted run from its newest valid checkpoint")
    resume.add_argument("run_dir", type=Path, help="results/<name>/<run_id>")
    resume.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="placement.KEY=VALUE",
        help="resume elsewhere, e.g. --set placement.strategy=one_device (only placement.* may change)",
    )
    resume.add_argument(
        "--accept-changed-data", action="store_true",
        help="go on although data files changed content since the run started (refused otherwise, exit 3)",
    )
    resume.set_defaults(func=cmd_resume)


def _add_workers(commands) -> None:
    workers = commands.add_parser("workers", help="try multi_worker locally: start N worker processes on 127.0.0.1 running one experiment")
    workers.add_argument("count", type=int, help="number of worker processes (2 or more)")
    workers.add_argument("config", type=Path, help="experiment YAML file")
    _add_overrides(workers, "override a config value in every worker, e.g. --set train.epochs=1")
    _add_results(workers)
    workers.set_defaults(func=cmd_workers)


def _add_compare(commands) -> None:
    compare = commands.add_parser("compare", help="print models side by side, across one or several runs")
    compare.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR", help="run directories (results/<name>/<run_id>) to put side by side")
    compare.add_argument("--csv", type=Path, default=None, help="also save the table as CSV")
    compare.add_argument("--pairs", action="store_true",
                         help="also compare every model of one run with every model of the others, paired on the images both were scored on "
                              "(the runs must have scored the same images; exit 2 says what differs)")
    compare.add_argument("--pairs-csv", type=Path, default=None, metavar="FILE", help="with --pairs: save the pairs as CSV")
    compare.add_argument("--chosen", action="store_true", help="with --pairs: only the model each group chose (runs with output.compare_by)")
    compare.add_argument("--metric", default=None, metavar="COLUMN",
                         help="with --pairs: compare on this summary column (val_f1, test_iou, ...) instead of the runs' ranking column, "
                              "which may then differ between the runs")
    _add_json(compare)
    compare.set_defaults(func=cmd_compare)


def _add_json(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print the table as JSON (a list of rows) for scripts, instead of a table")


def _add_runs(commands) -> None:
    runs = commands.add_parser("runs", help="list every run under the results folder, newest first, with its status and best member")
    runs.add_argument("name", nargs="?", default=None, metavar="NAME", help="only this experiment's runs (results/NAME); or a path: a results folder, an experiment's folder, a run")
    _add_results(runs, Path("results"), "results")
    _add_json(runs)
    runs.set_defaults(func=cmd_runs)


def _add_report(commands) -> None:
    report = commands.add_parser("report", help="(re)build the tables, plots and report.html of a run")
    report.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the run directory to rebuild from its files")
    report.set_defaults(func=cmd_report)


def _add_bench(commands) -> None:
    replay = commands.add_parser("export-batches", help="write the batches a run's members saw and their initial weights, to reproduce a member by hand")
    replay.add_argument("run_dir", type=Path, help="the run directory")
    replay.add_argument("--steps", type=int, required=True, help="the first N steps' batches")
    replay.add_argument("--out", type=Path, default=None, help="where to write them (default RUN/replay)")
    replay.set_defaults(func=cmd_export_batches)
    doctor = commands.add_parser("doctor", help="check this machine: versions, devices, XLA, mixed precision, determinism, a tiny fused step on every placement")
    doctor.add_argument("--quick", action="store_true", help="skip the tiny fused steps (each a process of its own, about 15 s each)")
    doctor.set_defaults(func=cmd_doctor)
    bench = commands.add_parser("bench", help="measure the fused step side by side (not a test: figures for the README)")
    bench.add_argument("--tiny", action="store_true", help="tiny models, a few minutes: only checks that every section works")
    bench.add_argument("--suite", choices=["standard", "quickstart"], default="standard", help="the models to measure")
    bench.add_argument("--section", action="append", default=None, help="run only these sections (repeatable)")
    bench.add_argument("--gpu", action="store_true", help="add the GPU section (precision, XLA, multi-GPU)")
    bench.add_argument("--out", type=Path, default=Path("results/bench"), help="writes OUT/<date>/bench.csv and bench.png")
    bench.add_argument("--rounds", type=int, default=None, help="timed rounds per section (contenders alternate every round)")
    bench.add_argument("--steps", type=int, default=None, help="steps per timed call")
    bench.add_argument(
        "--processes", type=int, default=1,
        help="repeat the bench in this many fresh processes and quote medians across them (one process's figures can sit a few %% off)",
    )
    bench.set_defaults(func=cmd_bench)


def _add_nightly(commands) -> None:
    nightly = commands.add_parser(
        "nightly", help="run (or resume) tonight's run, record it in the history, compare with earlier nights (exit 6 on regression)"
    )
    nightly.add_argument("config", type=Path, help="experiment YAML file")
    _add_overrides(nightly, "override a config value for tonight's run, e.g. --set train.epochs=2")
    _add_results(nightly)
    nightly.add_argument(
        "--night", default=None, metavar="YYYY-MM-DD",
        help="the night this run counts for (default: today's, by local time; see output.nightly.night_starts_at_hour)",
    )
    nightly.set_defaults(func=cmd_nightly)


def _add_history(commands) -> None:
    history = commands.add_parser("history", help="print an experiment's history across runs; pin a baseline")
    history.add_argument("name", metavar="NAME_OR_DIR", help="experiment name (under --results) or its folder results/<name>")
    _add_results(history, said="results")
    history.add_argument("--metric", action="append", default=None, help="columns to show (default: the watched metrics)")
    history.add_argument("--pin", default=None, metavar="RUN_ID", help="make this completed run the baseline nightly compares with")
    history.add_argument("--unpin", action="store_true", help="remove the baseline")
    history.add_argument("--csv", type=Path, default=None, help="also save the table as CSV")
    _add_json(history)
    history.set_defaults(func=cmd_history)


def _add_sample_data(commands) -> None:
    sample = commands.add_parser(
        "sample-data", help="write a small real-image segmentation set (from scikit-image's sample images) for the folder source"
    )
    sample.add_argument("out", type=Path, nargs="?", default=Path("data/skimage"), help="folder to write images/ and masks/ into")
    sample.set_defaults(func=cmd_sample_data)


def _add_models(commands) -> None:
    models = commands.add_parser("models", help="list the architectures, backbones and built-in models")
    models.set_defaults(func=cmd_models)


def cmd_run(args) -> int:
    from harness.config.loading import load_config

    config = load_config(args.config, args.overrides)
    from harness.api import run

    result = run(config, results_dir=args.results)
    _print_result(result)
    return EXIT_OK


def cmd_plan(args) -> int:
    from harness.api import planned

    plan, path = planned(args.config, args.overrides, args.results)
    for line in plan.describe():
        print(line)
    print(f"plan: {path}")
    return EXIT_OK


def cmd_resume(args) -> int:
    from harness.api import resume

    result = resume(args.run_dir, args.overrides, args.accept_changed_data)
    _print_result(result)
    return EXIT_OK


def cmd_workers(args) -> int:
    from harness.config.loading import load_config
    from harness.training.launch import launch_local_workers

    overrides = [*args.overrides, "placement.strategy=multi_worker"]
    load_config(args.config, overrides)  # a bad config fails here once, not in every worker
    return launch_local_workers(args.count, args.config, overrides, args.results)


def cmd_compare(args) -> int:
    from harness.outputs.compare import compare_command

    asked_for_pairs = args.pairs or args.pairs_csv is not None or args.chosen or args.metric is not None
    compare_command(args.run_dirs, as_json=args.json, csv=args.csv, pairs=asked_for_pairs, pairs_csv=args.pairs_csv, chosen=args.chosen,
                    metric=args.metric)
    return EXIT_OK


def cmd_report(args) -> int:
    from harness.outputs.derived import rebuild, unfinished_note
    from harness.outputs.printed import print_summary
    from harness.rundir import RunDir

    pool.start()
    summary = rebuild(args.run_dir)
    print_summary(summary, RunDir(args.run_dir).ranking_column(), args.run_dir)
    if note := unfinished_note(args.run_dir):
        print(note)
    print(f"report: {args.run_dir / 'report.html'}")
    return EXIT_OK


def cmd_export_batches(args) -> int:
    from harness.training.replay import export_batches

    out = export_batches(args.run_dir, args.steps, args.out)
    print(f"batches of steps 1-{args.steps}, initial weights and members.json: {out}")
    return EXIT_OK


def cmd_doctor(args) -> int:
    from harness.doctor import run_doctor

    return run_doctor(placements=not args.quick)


def cmd_bench(args) -> int:
    from harness.bench.suites import unknown_sections

    suite = "tiny" if args.tiny else args.suite
    # --rounds 0 would read as "not given" (the section's default) and a negative one as no round at all.
    for option, value in (("--processes", args.processes), ("--rounds", args.rounds), ("--steps", args.steps)):
        if value is not None and value < 1:
            raise ConfigError(f"bench {option}: must be 1 or more, got {value}")
    if problem := unknown_sections(args.section):
        raise ConfigError(problem)  # before TensorFlow loads and before a dated folder is made
    from harness.bench.bench import bench_text, run_bench, run_bench_processes

    if args.processes > 1:
        table = run_bench_processes(suite, args.out, args.processes, args.rounds, args.steps, args.gpu, args.section)
    else:
        table = run_bench(suite, args.out, args.rounds, args.steps, args.gpu, args.section)
    print(bench_text(table))
    return EXIT_OK


def cmd_nightly(args) -> int:
    from harness.config.loading import load_config
    from harness.nights.tonight import run_nightly

    config = load_config(args.config, args.overrides)
    night = _night(args.night)
    result = run_nightly(config, args.results, night, code_dir=args.config.resolve().parent)
    print((result.run_dir / "nightly.md").read_text(encoding="utf-8"))
    if result.regressions:
        print(f"harness: {len(result.regressions)} regression(s) on the night of {result.night}:", file=sys.stderr)
        for change in result.regressions:
            print(f"  - {change.describe()}", file=sys.stderr)
    return result.exit_code


def _night(text: str | None) -> str | None:
    from datetime import date

    from harness.errors import ConfigError

    if text is None:
        return None
    try:
        return date.fromisoformat(text).isoformat()
    except ValueError:
        raise ConfigError(f"--night {text!r}: expected a date like 2026-11-21") from None


def cmd_runs(args) -> int:
    from harness.outputs.printed import print_runs
    from harness.outputs.runs import list_runs, no_runs, where_runs_are

    results, name = where_runs_are(args.results, args.name)
    table = list_runs(results, name)
    if args.json:
        print(table.to_json(orient="records"))
        return EXIT_OK
    if table.empty:
        print(no_runs(results, name))
        return EXIT_OK
    print_runs(table, results)
    return EXIT_OK


def cmd_history(args) -> int:
    from harness.nights.tonight import find_history, history_table
    from harness.outputs.printed import print_history

    store = find_history(args.name, args.results)
    if args.pin:
        store.pin(args.pin)
        print(f"baseline: {args.pin}")
    if args.unpin:
        store.unpin()
        print("baseline removed")
    table = history_table(store, args.metric)
    baseline, name = store.baseline(), store.path.absolute().parent.name  # absolute: `history .` has a name too
    if args.json:
        keyed = table.assign(baseline=table["run_id"] == baseline)
        keyed.insert(0, "name", name)  # the keys `runs` and `compare` name a run by
        print(keyed.to_json(orient="records"))
        return EXIT_OK
    print_history(table, name, baseline)
    if args.csv:
        from harness.rundir import save_table_as

        save_table_as(table, args.csv, "--csv")
        print(f"saved: {args.csv}")
    return EXIT_OK


def cmd_sample_data(args) -> int:
    from harness.data.sample_data import check_out_folder, make_sample_data
    from harness.rundir import make_folder

    check_out_folder(args.out)
    for sub in ("images", "masks"):
        make_folder(Path(args.out) / sub, "sample-data OUT:")
    counts = make_sample_data(args.out)
    print(f"wrote {sum(counts.values())} image/mask pairs to {args.out}/images and {args.out}/masks (how: {args.out}/README.txt)")
    return EXIT_OK


def cmd_models(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from harness.config import catalog

    table = Table(title="architectures (models.*.arch)")
    for column in ("arch", "family", "notes"):
        table.add_column(column)
    for row in catalog.describe():
        table.add_row(*row)
    console = Console()
    console.print(table)
    console.print("backbones (models.*.backbone, segmentation-models only): " + ", ".join(catalog.SM_BACKBONES)
                  + "; every encoder starts from random weights (nothing is downloaded): models.*.weights loads a file you have "
                  "(docs/members.md, \"Pretrained weights\")")
    console.print("losses (models.*.loss or train.loss): bce, cce, dice, focal, and sums like 'bce + 0.5*dice'; "
                  "an autoencoder's is always mse, its reconstruction's")
    return EXIT_OK


def _print_result(result) -> None:
    """The ranking and where the run is; a multi_worker worker other than the chief trained in a
    scratch folder, now gone: it names the chief instead."""
    plan = result.info.get("placement") or {}
    if plan.get("chief") is False:
        print(f"harness: worker {(plan.get('task') or {}).get('index', '?')} is done; the chief wrote the run's results")
        return
    if len(result.summary):
        from harness.outputs.printed import print_summary

        print_summary(result.summary, result.ranked_by, result.run_dir)
    print(f"results: {result.run_dir}")

