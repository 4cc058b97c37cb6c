"""The real CLI, in subprocesses, as users and cron jobs run it."""

from __future__ import annotations

import argparse
import shlex
import sys
import json
from pathlib import Path

import pytest
from conftest import REPO, run_cli, run_main, tiny_config, write_yaml

from harness.cli import build_parser, main
from harness.rundir import read_csv


def test_smoke_experiment_end_to_end(tmp_path):
    (tmp_path / "tmp").mkdir()
    result = run_cli("run", REPO / "experiments" / "smoke.yaml", "--results", tmp_path, "--set", "train.epochs=2", env={"TMPDIR": str(tmp_path / "tmp")})
    assert result.returncode == 0, result.stderr
    (run_dir,) = (tmp_path / "smoke").iterdir()
    # The exit handlers ran: TensorFlow's removes the source files AutoGraph wrote (each run left them).
    assert not list((tmp_path / "tmp").glob("__autograph_generated_file*")), list((tmp_path / "tmp").iterdir())
    assert f"results: {run_dir}" in result.stdout
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "completed" and info["steps_done"] == 16 and info["trace_count"] == 1
    assert info["timing"]["fused_ms_per_step"] > 0
    summary = read_csv(run_dir / "summary.csv")
    assert sorted(summary["model"]) == ["deconv", "fcn", "unet"]
    assert (summary["ms_per_step"] > 0).all()
    losses = read_csv(run_dir / "losses.csv")
    assert not losses.duplicated(["model", "split", "metric", "step"]).any()
    assert "step 16/16" in result.stderr and "loss: fcn" in result.stderr  # progress lines in a log
    phases = ["building 3 member(s)", "compiling the fused step", "validating", "probing each model's step time", "exporting the models", "writing tables"]
    at = [result.stderr.find(f"harness: {phase}") for phase in phases]
    assert -1 not in at and at == sorted(at), "every slow phase is named, in order"
    assert "cuInit" not in result.stderr and "oneDNN" not in result.stderr  # TF start-up noise hidden
    assert (run_dir / "config.yaml").read_text().count("epochs: 2") == 1
    # The command leaves without the interpreter's teardown: everything is complete when it returns.
    assert (run_dir / "report.html").read_text().rstrip().endswith("</html>")
    assert losses["step"].max() == 16 and (run_dir / "losses.csv").read_text().endswith("\n")
    assert all((run_dir / "models" / m / "model.keras").stat().st_size > 0 for m in ("fcn", "unet", "deconv"))
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tb" / "fcn"), size_guidance={"tensors": 0})
    events.Reload()
    assert [e.step for e in events.Tensors("train/loss")] == list(range(1, 17)), "TensorBoard flushed to the last step"


def test_user_factory_from_config(tmp_path):
    raw = tiny_config(models=[{"name": "mine", "arch": "factories:small_convnet", "options": {"width": 3}}])
    result = run_cli("run", write_yaml(tmp_path / "c.yaml", raw), "--results", tmp_path / "r", env={"PYTHONPATH": str(REPO / "tests")})
    assert result.returncode == 0, result.stderr
    summary = read_csv(next((tmp_path / "r" / "tiny").glob("*/summary.csv")))
    assert summary.loc[0, "params"] == 3 * 3 * 3 * 3 + 3 + 3 * 1 + 1


def test_resume_of_a_completed_run_does_not_ask_for_its_code(tmp_path, monkeypatch):
    # a script's mymodels.py trained the run; `harness resume` from another folder has nothing to train
    (tmp_path / "mymodels.py").write_text((REPO / "tests" / "factories.py").read_text())
    monkeypatch.syspath_prepend(str(tmp_path))
    raw = tiny_config(models=[{"name": "mine", "arch": "mymodels:small_convnet", "options": {"width": 3}}], train={"steps": 2})
    assert run_main("run", write_yaml(tmp_path / "c.yaml", raw), "--results", tmp_path / "r").returncode == 0
    (run_dir,) = (tmp_path / "r" / "tiny").iterdir()
    assert json.loads((run_dir / "run.json").read_text())["started_in"] == str(Path.cwd())  # where its relative paths are read from
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(tmp_path)])  # the module gone from the path,
    monkeypatch.delitem(sys.modules, "mymodels")  # and from this process
    result = run_main("resume", run_dir)
    assert result.returncode == 0 and "already completed; nothing to resume" in result.stderr, result.stderr
    assert "mine" in result.stdout
    result = run_main("resume", run_dir, "--set", "train.steps=3")  # still refused: it would not train the same
    assert result.returncode == 2 and "only where it runs may change" in result.stderr


def test_a_run_asked_from_another_folder_says_where_it_was_started(tmp_path, monkeypatch):
    # real_images.yaml's `data.images: data/skimage/images`, resumed from /tmp: "folder does not
    # exist (a relative path is read from the current folder, /tmp)", and nothing of where it was
    from harness.config.loading import validate_config
    from harness.rundir import RunDir, RunRecord, RunStatus
    from harness.rundir.start_folder import elsewhere_hint

    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    (project / "data" / "images").mkdir(parents=True), (project / "data" / "masks").mkdir(), elsewhere.mkdir()
    raw = tiny_config(data={"source": "folder", "images": "data/images", "masks": "data/masks", "image_size": [16, 16], "train_size": None, "val_size": None})
    config = validate_config(raw)
    run = RunDir(project / "results" / "tiny" / "20261207-010000")
    run.path.mkdir(parents=True)
    write_yaml(run.config_file, config.to_dict())
    run.write_record(RunRecord(name="tiny", run_id=run.run_id, status=RunStatus.INTERRUPTED, config_fingerprint=config.fingerprint(),
                               total_steps=8, steps_done=4, started_in=str(project)))
    monkeypatch.chdir(project)
    assert elsewhere_hint(config, str(project)) is None  # from the run's own folder: nothing to say
    monkeypatch.chdir(elsewhere)
    for command in (["resume", run.path], ["export-batches", run.path, "--steps", "1"]):
        result = run_main(*command)
        assert result.returncode == 2, result.stderr
        assert (f"the run's data paths are relative to the folder it was started in, {project}, and this command runs in {elsewhere}, where "
                f"they do not exist (data.images: data/images; data.masks: data/masks): run it from there (cd {project})") in result.stderr
    assert elsewhere_hint(config, None) is None  # a run from before started_in: the scan's own message


def test_user_factory_size_rule_is_checked(tmp_path):
    raw = tiny_config(models=[{"name": "mine", "arch": "factories:small_convnet"}], data={"image_size": 15})
    result = run_main("run", write_yaml(tmp_path / "c.yaml", raw))  # tests/ is on sys.path
    assert result.returncode == 2 and "multiple of 2" in result.stderr and "16x16" in result.stderr


def test_models_lists_architectures_and_backbones():
    result = run_main("models")
    assert result.returncode == 0, result.stderr
    for name in ("Unet", "Linknet", "FPN", "PSPNet", "tiny_unet", "resnet18", "efficientnetb0", "package.module:function"):
        assert name in result.stdout
    assert "every encoder starts from random weights (nothing is downloaded): models.*.weights loads a file you have" in " ".join(result.stdout.split())


def subcommands() -> dict:
    parser = build_parser()
    (group,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return group.choices


def test_every_command_has_help_and_every_option_says_what_it_does(capsys):
    commands = subcommands()
    assert set(commands) >= {"run", "resume", "workers", "compare", "report", "bench", "nightly", "history", "sample-data", "models"}
    for name, command in commands.items():
        with pytest.raises(SystemExit) as exit_info:
            main([name, "--help"])
        text = capsys.readouterr().out
        assert exit_info.value.code == 0 and f"usage: harness {name}" in text
        assert f"examples:\n  harness {name}" in text  # a few examples end every command's help
        undocumented = [a.dest for a in command._actions if not a.help and not isinstance(a, argparse._HelpAction)]
        assert not undocumented, f"harness {name}: options without help: {undocumented}"


def test_every_example_in_the_help_parses():
    from harness.bench.suites import unknown_sections
    from harness.cli import EXAMPLES

    for name, examples in EXAMPLES.items():
        for example in examples:
            words = shlex.split(example.split("#")[0].split("|")[0])
            assert words[0] == "harness", example
            args = build_parser().parse_args(words[1:])  # exits 2 (a failure here) if an example is wrong
            assert unknown_sections(getattr(args, "section", None)) is None, example  # checked after parsing


def test_the_results_folder_is_given_as_results_or_as_the_config_keys_spelling(tmp_path):
    commands = {"run": ["c.yaml"], "plan": ["c.yaml"], "workers": ["2", "c.yaml"], "runs": [], "history": ["smoke"]}
    for name, positional in commands.items():
        for flag in ("--results", "--results-dir"):
            args = build_parser().parse_args([name, *positional, flag, str(tmp_path)])
            assert args.results == tmp_path, (name, flag)
    assert build_parser().parse_args(["runs"]).results == Path("results")  # runs lists ./results by default
    assert build_parser().parse_args(["run", "c.yaml"]).results is None  # run: output.results_dir decides


def test_version(capsys):
    from harness import __version__

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0 and capsys.readouterr().out.strip() == f"harness {__version__}"


def test_a_run_records_the_running_codes_version(monkeypatch):
    """run.json's harness version is the code's own, not what an editable install's metadata kept
    from when it was installed."""
    from importlib import metadata

    import harness
    from harness.rundir import versions

    installed = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: "0.0.1" if name == "harness" else installed(name))
    monkeypatch.setattr(harness, "__version__", "9.9.9")
    assert versions()["harness"] == "9.9.9" and versions()["tensorflow"] == installed("tensorflow")


def test_no_command_is_a_usage_error(capsys):
    assert main([]) == 2
    assert "usage: harness" in capsys.readouterr().out


def test_bad_arguments_are_usage_errors_in_process(tmp_path, capsys):
    assert main(["run", str(tmp_path / "missing.yaml")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["nightly", str(REPO / "experiments" / "smoke.yaml"), "--night", "tomorrow"]) == 2
    assert "--night 'tomorrow'" in capsys.readouterr().err
    for option, value in (("--processes", "0"), ("--rounds", "0"), ("--rounds", "-1"), ("--steps", "0")):
        assert main(["bench", "--tiny", "--section", "loop", option, value, "--out", str(tmp_path / "bench")]) == 2
        assert f"bench {option}: must be 1 or more, got {value}" in capsys.readouterr().err
    assert main(["bench", "--section", "loop", "--section", "steps_per_call", "--out", str(tmp_path / "bench")]) == 2
    assert "unknown section(s) ['steps_per_call']; choose from loop, overhead" in capsys.readouterr().err
    assert not (tmp_path / "bench").exists()  # refused before anything was measured or written


def test_runs_and_compare_import_no_tensorflow(tmp_path):
    """Commands that only read files answer without TensorFlow's import (seconds on a busy machine)."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from harness.cli import main\n"
        f"assert main(['runs', '--results', {str(tmp_path)!r}]) == 0\n"
        f"assert main(['compare', {str(tmp_path / 'missing')!r}]) == 2\n"
        "print(sorted(m for m in ('tensorflow', 'tf_keras', 'keras') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_a_reader_that_stops_reading_leaves_the_commands_own_exit_code():
    """`harness models | head -1`: the reader closes the pipe before the command has printed. rich
    answered the broken pipe with SystemExit(1), the contract's code for a bug in harness, and a
    command stopped wherever it was printing; it now finishes with its own code and says nothing."""
    import subprocess
    import sys

    from conftest import cli_environment

    proc = subprocess.Popen([sys.executable, "-m", "harness", "models"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_environment(None))
    proc.stdout.close()  # gone before the command's first line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 0 and err == "", err


@pytest.mark.parametrize("command", ["report", "resume", "compare"])
def test_a_folder_that_is_not_a_run_is_named_with_the_runs_it_holds_or_as_missing(tmp_path, command):
    experiment = tmp_path / "results" / "smoke"
    for run_id in ("20261125-090000", "20261126-080000"):
        (experiment / run_id).mkdir(parents=True)
        (experiment / run_id / "run.json").write_text("{}")
    typed = run_main(command, experiment)  # the experiment's folder, where a run was meant
    assert typed.returncode == 2 and f"experiment's folder of 2 run(s), the newest {experiment / '20261126-080000'}" in typed.stderr, typed.stderr
    results = run_main(command, tmp_path / "results")  # the results folder itself
    assert results.returncode == 2 and f"results folder of 1 experiment(s) (smoke): harness runs --results {tmp_path / 'results'}" in results.stderr, results.stderr
    missing = run_main(command, tmp_path / "nowhere")
    assert missing.returncode == 2 and f"{tmp_path / 'nowhere'} does not exist" in missing.stderr, missing.stderr
    config = write_yaml(tmp_path / "smoke.yaml", tiny_config())  # the experiment's config, where its run was meant
    named = run_main(command, config)
    assert named.returncode == 2 and f"it is a config file: `harness run {config}` trains it" in named.stderr, named.stderr


def test_compare_over_a_glob_of_an_experiment_folder_names_its_own_files_and_the_glob_of_its_runs(tmp_path):
    experiment = tmp_path / "results" / "smoke"
    (experiment / "20261126-080000").mkdir(parents=True)
    (experiment / "20261126-080000" / "run.json").write_text("{}")
    (experiment / "history.sqlite").write_bytes(b"")  # what `results/smoke/*` matches beside the runs
    typed = run_main("compare", experiment / "history.sqlite")
    assert typed.returncode == 2, typed.stderr
    assert f"it lies in the experiment's folder beside its 1 run(s) ({experiment / '2*'} names only the runs)" in typed.stderr, typed.stderr


def test_a_full_disk_met_outside_a_runs_own_handling_exits_4_naming_the_file(monkeypatch, capsys):
    """A nightly whose run had finished met a full disk rewriting report.html with its nightly
    section: an internal error (exit 1, "a bug in harness") instead of exit 4."""
    import errno

    import harness.cli as cli

    def full(args):
        raise OSError(errno.ENOSPC, "No space left on device", "/results/smoke/20261128-224454/report.html")

    monkeypatch.setattr(cli, "cmd_report", full)
    assert main(["report", "anywhere"]) == 4
    err = capsys.readouterr().err
    assert "disk full while writing /results/smoke/20261128-224454/report.html: free some space" in err and "bug" not in err

    def broken(args):
        raise OSError(errno.EACCES, "Permission denied", "x")  # not a full disk: not said as one

    monkeypatch.setattr(cli, "cmd_report", broken)
    assert main(["report", "anywhere"]) != 4 and "disk full" not in capsys.readouterr().err


@pytest.mark.parametrize("errno_name, reason", [("EACCES", "Permission denied"), ("EROFS", "Read-only file system")])
def test_a_path_this_user_may_not_write_is_named_not_called_a_bug(tmp_path, capsys, monkeypatch, errno_name, reason):
    """Met past every nearer check (a run folder under a results folder another user made): exit 2
    naming the path. Raised from code compiled as "<string>", as harness's own would be: a function
    written in this file would count as the user's code."""
    import errno

    import harness.cli as cli

    denied = tmp_path / "theirs" / "20261130-211338"
    raising = f"def refused(args):\n    raise OSError({getattr(errno, errno_name)}, {reason!r}, {str(denied)!r})\n"
    exec(compile(raising, "<string>", "exec"), namespace := {})
    monkeypatch.setattr(cli, "cmd_runs", namespace["refused"])
    assert cli.main(["runs", "--results", str(tmp_path)]) == 2
    said = capsys.readouterr().err
    assert f"harness: {denied}: {reason} (for this user). Run the command as a user who may write there" in said and "internal error" not in said

    def users_own_code(args):  # the user's code meeting it: their traceback says more
        raise PermissionError(13, "Permission denied", str(denied))

    monkeypatch.setattr(cli, "cmd_runs", users_own_code)
    assert cli.main(["runs", "--results", str(tmp_path)]) == 2
    assert "users_own_code" in capsys.readouterr().err
