"""`harness runs` and the `--json` output of runs, compare and history, in process."""

from __future__ import annotations

import json
import re
import shutil

import pytest
import yaml
from conftest import run_main, tiny_config, trains_runs, write_yaml

from harness.rundir import FolderLock, read_csv


@pytest.fixture(scope="module")
@trains_runs
def results(tmp_path_factory):
    folder = tmp_path_factory.mktemp("runs")
    config = write_yaml(folder / "c.yaml", tiny_config(train={"epochs": 1}))
    for _ in range(2):
        assert run_main("run", config, "--results", folder / "results").returncode == 0
    other = write_yaml(folder / "o.yaml", {**tiny_config(train={"epochs": 1}), "name": "other"})
    assert run_main("nightly", other, "--results", folder / "results", "--night", "2026-11-20").returncode == 0
    return folder / "results"


def test_runs_lists_every_run_newest_first_with_its_best_member(results):
    listed = run_main("runs", "--results", results, "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [r["name"] for r in rows].count("tiny") == 2 and [r["name"] for r in rows].count("other") == 1
    assert [r["started"] for r in rows] == sorted((r["started"] for r in rows), reverse=True)
    for row in rows:
        summary = (results / row["name"] / row["run_id"] / "summary.csv").read_text().splitlines()
        assert row["status"] == "completed" and row["steps"] == 4 and row["total_steps"] == 4 and row["members"] == 3
        assert row["best"] == summary[1].split(",")[1] and row["ranked_by"] == "val_iou"
    only = json.loads(run_main("runs", "tiny", "--results", results, "--json").stdout)
    assert {r["name"] for r in only} == {"tiny"}
    table = run_main("runs", "--results", results)
    assert "newest first" in table.stdout and "completed" in table.stdout


def test_runs_tells_a_live_run_from_one_whose_run_json_is_stale(results):
    run_dir = next((results / "tiny").iterdir())
    info = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps({**info, "status": "running"}))
    try:
        stale = {r["run_id"]: r["status"] for r in json.loads(run_main("runs", "tiny", "--results", results, "--json").stdout)}
        assert stale[run_dir.name] == "stopped (run.json says running)"
        with FolderLock(run_dir):
            live = {r["run_id"]: r["status"] for r in json.loads(run_main("runs", "tiny", "--results", results, "--json").stdout)}
        assert live[run_dir.name] == "running"
    finally:
        (run_dir / "run.json").write_text(json.dumps(info))


def test_a_path_given_for_name_lists_the_runs_the_folder_holds(results):
    # What users paste from the other commands' output: a results folder, an experiment's, a run's.
    run_dir = next((results / "tiny").iterdir())
    for path, names in ((results, {"tiny", "other"}), (results / "tiny", {"tiny"}), (run_dir, {"tiny"})):
        listed = run_main("runs", path, "--json")
        assert listed.returncode == 0, listed.stderr
        rows = json.loads(listed.stdout)
        assert {r["name"] for r in rows} == names and len(rows) == (3 if len(names) == 2 else 2), path
    assert f"runs under {results}" in run_main("runs", results / "tiny").stdout


def test_a_name_that_is_a_folder_of_runs_here_and_no_experiment_of_the_results_folder_is_that_folder(results, tmp_path, monkeypatch):
    # `harness runs archive`, where ./archive holds runs moved out of results/: listed, not "no runs under results/archive".
    shutil.copytree(results / "tiny", tmp_path / "archive")
    monkeypatch.chdir(tmp_path)
    rows = json.loads(run_main("runs", "archive", "--results", results, "--json").stdout)
    assert len(rows) == 2 and {r["name"] for r in rows} == {"tiny"}
    shutil.copytree(results / "other", tmp_path / "tiny")  # an experiment of the results folder wins over a folder of its name
    rows = json.loads(run_main("runs", "tiny", "--results", results, "--json").stdout)
    assert len(rows) == 2 and {r["name"] for r in rows} == {"tiny"}


def test_no_runs_says_where_it_looked(tmp_path, monkeypatch):
    result = run_main("runs", "--results", tmp_path)
    assert result.returncode == 0 and f"no runs under {tmp_path}" in result.stdout
    (tmp_path / "smoke").mkdir()
    monkeypatch.chdir(tmp_path)
    assert run_main("runs", "smoke/").stdout.strip() == "no runs under smoke"  # a path, not results/smoke/


def test_no_runs_of_a_mistyped_experiment_names_the_experiments_that_have_runs(tmp_path):
    from harness.outputs.runs import no_runs
    from harness.rundir import RunDir, RunRecord

    for name in ("smoke", "quickstart"):
        RunDir(tmp_path / name / "20261127-000000").write_record(RunRecord(name=name, run_id="20261127-000000"))
    (tmp_path / "notes").mkdir()  # a folder without runs is no experiment to suggest
    assert no_runs(tmp_path, "smok") == f"no runs under {tmp_path / 'smok'}; did you mean 'smoke'? (experiments with runs there: quickstart, smoke)"
    assert no_runs(tmp_path, None) == f"no runs under {tmp_path}"


def test_compare_and_history_print_json_for_scripts(results):
    runs = sorted((results / "tiny").iterdir())
    compared = json.loads(run_main("compare", *runs, "--json").stdout)
    assert len(compared) == 6 and {"run", "model", "val_iou"} <= set(compared[0])
    history = json.loads(run_main("history", "other", "--results", results, "--json").stdout)
    assert len(history) == 1 and history[0]["status"] == "completed" and history[0]["baseline"] is False
    listed = json.loads(run_main("runs", "--results", results, "--json").stdout)
    # One run is named by the same keys in every command's JSON.
    for rows in (compared, history, listed):
        assert all(isinstance(r["name"], str) and isinstance(r["run_id"], str) for r in rows)
    assert {(r["name"], r["run_id"]) for r in compared} <= {(r["name"], r["run_id"]) for r in listed}
    assert compared[0]["run"] == f"{compared[0]['name']}/{compared[0]['run_id']}"


@pytest.mark.parametrize("width", [80, 160])
def test_the_ranking_fits_the_terminal_and_says_what_it_is_ranked_by(results, monkeypatch, width):
    monkeypatch.setenv("COLUMNS", str(width))
    run_dir = next((results / "tiny").iterdir())
    printed = run_main("report", run_dir).stdout
    lines = [line for line in printed.splitlines() if not line.startswith("report: ")]  # a path is as long as it is
    assert all(len(line) <= width for line in lines), max(lines, key=len)
    assert "ranked by val_iou, best first" in printed and any(line.startswith("┃ rank ") for line in lines[2:5])  # under the title, wrapped or not
    best = [line for line in lines if line.startswith("│    1 ")][0]
    assert re.search(r"\d\.\d{4} \[\d\.\d{4}, \d\.\d{4}\]", best), "the ranking metric with its interval"
    shown = int(re.search(r"\((\d+) of \d+ columns", printed).group(1))
    assert (shown > 6) == (width == 160)


def test_load_run_gives_tables_settings_pairs_and_models_loaded_when_first_used(results):
    from harness.api import load_run
    from harness.training.records import ExportedModels

    run_dir = next((results / "tiny").iterdir())
    result = load_run(run_dir)
    assert isinstance(result.models, ExportedModels) and sorted(result.models) == ["deconv", "fcn", "unet"]
    assert result.models._loaded == {}, "nothing is loaded before it is asked for"
    assert result.models["unet"].output_shape[-1] == 1 and list(result.models._loaded) == ["unet"]
    summary = result.summary.set_index("model")
    assert summary.loc["deconv", "optimizer"] == "sgd" and summary.loc["deconv", "learning_rate"] == 0.05
    assert summary.loc["deconv", "loss"] == "focal+dice" and summary.loc["unet", "arch"] == "tiny_unet"
    assert str(result.summary["diverged_step"].dtype) == "Int64" and str(result.summary["params"].dtype) == "Int64"
    assert len(result.pairs) == 3 and "supported" in result.pairs
    assert len(result.val_scores) > 0
    text = repr(result)
    assert text.startswith("RunResult(") and "completed" in text and "best" in text and len(text) < 200


@pytest.mark.slow
def test_saved_model_export_serves_what_the_model_predicts(tmp_path):
    import numpy as np

    from harness.api import run
    from harness.config.loading import validate_config
    from harness.core.backend import import_tf

    tf = import_tf()
    raw = tiny_config(train={"epochs": 1}, output={"probe_steps": 0, "progress": "none", "export_formats": ["keras", "saved_model"]})
    result = run(validate_config(raw), results_dir=tmp_path)
    folder = result.run_dir / "models" / "unet" / "model_saved_model"
    served = tf.saved_model.load(str(folder))
    images = np.random.default_rng(0).random((2, 16, 16, 3)).astype("float32")
    np.testing.assert_allclose(served.serve(images).numpy(), result.models["unet"](images, training=False).numpy(), rtol=1e-5, atol=1e-6)
    assert (result.run_dir / "models" / "unet" / "model.keras").exists()
    assert not list(result.run_dir.glob("models/*/.*partial*")), "no temporary folder left"


def test_compare_says_which_settings_differ_between_the_runs(results, tmp_path):
    config = write_yaml(tmp_path / "c.yaml", tiny_config(train={"epochs": 1, "optimizer": {"name": "sgd", "learning_rate": 0.1}}))
    assert run_main("run", config, "--results", tmp_path / "r").returncode == 0
    runs = [next((results / "tiny").iterdir()), next((tmp_path / "r" / "tiny").iterdir())]
    printed = run_main("compare", *runs).stdout
    assert "settings that differ between these runs:" in printed
    assert "train.optimizer.name (fcn, unet took it too):" in printed and "= adam" in printed and "= sgd" in printed
    assert "models.fcn.optimizer.name" not in printed, "a setting the models took from train is said on its line"
    assert "models.unet.arch" not in printed, "what is the same is not listed"
    copy = tmp_path / "copy" / "tiny" / "20261101-000000"  # the same settings in another run
    shutil.copytree(runs[0], copy)
    same = run_main("compare", runs[0], copy).stdout
    assert "the runs' settings are the same" in same and "versions that differ" not in same
    record = json.loads((copy / "run.json").read_text())
    record["versions"]["tensorflow"] = "2.20.0"  # the copy as if made with an older TensorFlow
    (copy / "run.json").write_text(json.dumps(record))
    other = run_main("compare", runs[0], copy).stdout
    assert "versions that differ between these runs" in other
    assert re.search(r"tensorflow: tiny/\S+ = 2\.21\.\d+, tiny/20261101-000000 = 2\.20\.0", other), other
    # Of output.*, what changes a score: which weights the test split scored. Where files go does not.
    settings = yaml.safe_load((copy / "config.yaml").read_text())
    settings["output"].update(select_by="final", results_dir="elsewhere", probe_steps=1)
    (copy / "config.yaml").write_text(yaml.safe_dump(settings))
    scored = run_main("compare", runs[0], copy).stdout
    assert "output.select_by:" in scored and "= best" in scored and "= final" in scored
    assert "results_dir" not in scored and "probe_steps" not in scored


def test_a_model_in_one_run_only_is_one_line_of_the_settings_that_differ(tmp_path):
    from harness.outputs.compare import setting_lines

    models = [{"name": "fcn", "arch": "tiny_fcn", "optimizer": {"learning_rate": 0.1}}, {"name": "gen", "kind": "gan", "arch": "tiny_unet"}]
    runs = []
    for name, seed, listed in (("one", 0, models), ("two", 1, models[:1])):
        (tmp_path / name / "20261127-000000").mkdir(parents=True)
        runs.append(write_yaml(tmp_path / name / "20261127-000000" / "config.yaml", {"seed": seed, "models": listed, "output": {"plot_formats": []}}).parent)
    lines = setting_lines(runs)[0]
    assert lines == ["models.gen: one/20261127-000000 = gan tiny_unet, two/20261127-000000 = -",
                     "seed: one/20261127-000000 = 0, two/20261127-000000 = 1"], lines


def test_a_train_setting_every_model_took_is_one_line_of_the_settings_that_differ(tmp_path):
    """config.yaml copies `--set train.optimizer.learning_rate=0.01` into each model entry without
    its own: the rate was listed three times, once for train and once per model. A model's line
    that differs exactly as train's does is said on train's; one that differs otherwise stays."""
    from harness.outputs.compare import setting_lines

    def entry(name, rate):
        return {"name": name, "arch": "tiny_fcn", "optimizer": {"name": "adam", "learning_rate": rate}}

    runs = []
    for name, rate, own in (("one", 0.003, 0.05), ("two", 0.01, 0.05), ("three", 0.01, 0.2)):
        folder = tmp_path / name / "20261129-000000"
        folder.mkdir(parents=True)
        listed = [entry("unet", rate), entry("unet.b", rate), entry("deconv", own)]
        runs.append(write_yaml(folder / "config.yaml", {"models": listed, "train": {"optimizer": {"name": "adam", "learning_rate": rate}}}).parent)
    assert setting_lines(runs[:2])[0] == [
        "train.optimizer.learning_rate (unet, unet.b took it too): one/20261129-000000 = 0.003, two/20261129-000000 = 0.01"]
    assert setting_lines(runs[1:])[0] == [
        "models.deconv.optimizer.learning_rate: two/20261129-000000 = 0.05, three/20261129-000000 = 0.2"]
    took_all = []
    for name, rate in (("four", 0.003), ("five", 0.01)):
        folder = tmp_path / name / "20261129-000000"
        folder.mkdir(parents=True)
        listed = [entry("unet", rate), entry("unet.b", rate), entry("deconv", rate)]
        took_all.append(write_yaml(folder / "config.yaml", {"models": listed, "train": {"optimizer": {"name": "adam", "learning_rate": rate}}}).parent)
    assert setting_lines(took_all)[0] == [
        "train.optimizer.learning_rate (every model's too): four/20261129-000000 = 0.003, five/20261129-000000 = 0.01"]


def test_settings_an_older_harness_did_not_have_are_listed_apart_from_those_that_differ(tmp_path, capsys):
    """A run an older harness made has no key for a setting added since: `compare` listed each such
    setting among those that differ (13 against a run of the first release), ahead of a real change.
    They are listed apart, where the other runs left them at their default; a setting the older
    harness could not have had, set to anything else, and a section set in one run and null in the
    other, stay differences."""
    from harness.outputs.compare import print_settings, setting_lines

    def run_with(name: str, **sections) -> Path:
        folder = tmp_path / name / "20261201-000000"
        folder.mkdir(parents=True)
        return write_yaml(folder / "config.yaml", {"models": [{"name": "fcn", "arch": "tiny_fcn"}], **sections}).parent

    old = run_with("old", data={"train_size": 64}, train={"epochs": 2, "race": None})
    new = run_with("new", data={"train_size": 64, "exif_orientation": "ignore", "test_size": 8},
                   train={"epochs": 3, "race": {"rungs": [1]}}, models=[{"name": "fcn", "arch": "tiny_fcn", "weights": None}])
    differing, not_had = setting_lines([old, new])
    assert differing == ["data.test_size: old/20261201-000000 = - (then 0), new/20261201-000000 = 8",  # not its default: a change
                         "train.epochs: old/20261201-000000 = 2, new/20261201-000000 = 3",
                         # one line, the section beside the null: setting by setting it read
                         # `train.race: old = None, new = -` and `train.race.rungs: old = -, new = [1]`
                         "train.race: old/20261201-000000 = None, new/20261201-000000 = {rungs: [1]}"], differing
    assert not_had == ["data.exif_orientation: old/20261201-000000 = -, new/20261201-000000 = ignore",
                       "models.fcn.weights: old/20261201-000000 = -, new/20261201-000000 = None"], not_had
    print_settings([old, new])
    printed = capsys.readouterr().out
    assert printed.index("settings that differ") < printed.index("train.epochs") < printed.index("did not have yet") < printed.index("exif_orientation")
    same = run_with("same", data={"train_size": 64, "exif_orientation": "ignore"}, train={"epochs": 2, "race": None})
    assert setting_lines([old, same]) == ([], ["data.exif_orientation: old/20261201-000000 = -, same/20261201-000000 = ignore"])
    print_settings([old, same])
    assert capsys.readouterr().out.startswith("the settings every run's harness had are the same")


def test_a_section_set_in_one_run_and_null_in_another_is_one_line_with_the_whole_section(tmp_path):
    """A race against a run without one read `train.race: a = -, b = None` and a line per rung
    setting with `-` on the other side, as if neither run had a race; nested settings of both stay
    lines of their own where both runs set the section."""
    from harness.outputs.compare import setting_lines

    runs = []
    for name, train in (("raced", {"race": {"rungs": [1, 3], "keep": 0.6}, "early_stopping": None, "optimizer": {"learning_rate": 0.1}}),
                        ("stopped", {"race": None, "early_stopping": {"patience": 2}, "optimizer": {"learning_rate": 0.2}})):
        folder = tmp_path / name / "20261207-000000"
        folder.mkdir(parents=True)
        runs.append(write_yaml(folder / "config.yaml", {"models": [{"name": "fcn", "arch": "tiny_fcn"}], "train": train}).parent)
    assert setting_lines(runs)[0] == [
        "train.early_stopping: raced/20261207-000000 = None, stopped/20261207-000000 = {patience: 2}",
        "train.optimizer.learning_rate: raced/20261207-000000 = 0.1, stopped/20261207-000000 = 0.2",
        "train.race: raced/20261207-000000 = {rungs: [1, 3], keep: 0.6}, stopped/20261207-000000 = None"]


def test_compare_compares_an_interrupted_run_on_what_it_has_and_says_so(results, tmp_path):
    import shutil

    finished = next((results / "tiny").glob("2*"))
    interrupted = tmp_path / "tiny" / "20261120-000000"
    shutil.copytree(finished, interrupted)
    (interrupted / "summary.csv").unlink()
    info = json.loads((interrupted / "run.json").read_text())
    (interrupted / "run.json").write_text(json.dumps({**info, "status": "interrupted", "steps_done": 4}))
    with open(interrupted / "losses.csv", "a") as losses:
        losses.write("5,2,fcn,val,io")  # killed in the middle of a row: the row in progress is left out
    compared = run_main("compare", finished, interrupted, "--json")
    assert compared.returncode == 0, compared.stderr
    rows = json.loads(compared.stdout)
    ours = [r for r in rows if r["run"] == "tiny/20261120-000000"]
    assert sorted(r["model"] for r in ours) == ["deconv", "fcn", "unet"] and all(r["val_iou"] is not None for r in ours)
    assert {r["compared_on"] for r in ours} == {"last evaluation so far: interrupted at step 4/4"}
    assert {r["compared_on"] for r in rows if r not in ours} == {"summary.csv"}
    printed = " ".join(run_main("compare", finished, interrupted).stdout.split())  # the note wraps at the width
    assert "Not finished, compared on each member's last evaluation so far" in printed and "tiny/20261120-000000" in printed
    from harness.api import load_run

    assert load_run(interrupted).losses["step"].max() == 4  # the API reads it as compare does
    assert run_main("compare", tmp_path / "nothing").returncode == 2


def test_compare_says_a_summary_report_wrote_for_a_stopped_run_is_from_where_it_stopped(results, tmp_path):
    # `harness report` of an interrupted run writes its summary.csv; compare took it as a finished
    # run's, its scores from step 4 of 100 beside other runs' final ones without a word.
    import shutil

    finished = next((results / "tiny").glob("2*"))
    stopped = tmp_path / "tiny" / "20261120-000000"
    shutil.copytree(finished, stopped)
    info = json.loads((stopped / "run.json").read_text())
    (stopped / "run.json").write_text(json.dumps({**info, "status": "interrupted", "steps_done": 4, "total_steps": 100}))
    rows = json.loads(run_main("compare", finished, stopped, "--json").stdout)
    assert {r["compared_on"] for r in rows if r["run"] == "tiny/20261120-000000"} == {
        "summary.csv of a run not at its end: interrupted at step 4/100"}
    assert {r["compared_on"] for r in rows if r["run"] != "tiny/20261120-000000"} == {"summary.csv"}
    printed = " ".join(run_main("compare", finished, stopped).stdout.split())
    assert "Not at their end, compared on the summary.csv harness report wrote when they stopped (see compared_on): tiny/20261120-000000." in printed
    assert "Not finished" not in printed
    # resumed since and stopped again at step 12: the summary is still of step 4, the step it was written at
    (stopped / "run.json").write_text(json.dumps({**info, "status": "interrupted", "steps_done": 12, "total_steps": 100}))
    rows = json.loads(run_main("compare", stopped, "--json").stdout)
    assert {r["compared_on"] for r in rows} == {"summary.csv of a run not at its end: interrupted at step 12/100, the summary of step 4"}


@pytest.mark.parametrize("damage", [b"\x00\x01\xff\xfe", b"garbage,,,\n", b"rank,model\n", b""])
def test_compare_names_a_damaged_summary_and_exits_2_without_a_traceback(results, tmp_path, damage):
    import shutil

    damaged = tmp_path / "tiny" / "20261120-000000"
    shutil.copytree(next((results / "tiny").glob("2*")), damaged)
    (damaged / "summary.csv").write_bytes(damage)
    compared = run_main("compare", damaged)
    assert compared.returncode == 2 and f"{damaged / 'summary.csv'}" in compared.stderr
    assert "Traceback" not in compared.stderr and "your code raised" not in compared.stderr


@pytest.mark.parametrize(("damaged", "content", "said"), [
    ("losses.csv", b"\x00\x01\xff\xfe", "cannot be read as a table"),
    ("losses.csv", b"", "cannot be read as a table"),
    ("val_scores.csv", b"\x00\x01\xff\xfe", "cannot be read as a table"),
    ("val_scores.csv", b"step,epoch\n1,2\n", "lacks the column(s) model, image, loss"),
])
def test_report_names_a_damaged_table_of_the_run_and_exits_2_without_a_traceback(results, tmp_path, damaged, content, said):
    import shutil

    copy = tmp_path / "tiny" / "20261120-000000"
    shutil.copytree(next((results / "tiny").glob("2*")), copy)
    (copy / damaged).write_bytes(content)
    rebuilt = run_main("report", copy)
    assert rebuilt.returncode == 2 and f"{copy / damaged}" in rebuilt.stderr and said in rebuilt.stderr
    assert "internal error" not in rebuilt.stderr and "Traceback" not in rebuilt.stderr


def test_report_refuses_a_score_table_cut_short_rather_than_dropping_its_statistics(results, tmp_path):
    """A val_scores.csv cut short once rebuilt a report without its intervals' image part and said
    nothing: cut in a row, or at a row's end (one member's last evaluation holds fewer images)."""
    import shutil

    finished = next((results / "tiny").glob("2*"))
    whole = (finished / "val_scores.csv").read_bytes()
    for name, content, said in (("mid_row", whole[: len(whole) - 7], "ends in the middle of a row: it was cut short"),
                                ("at_a_row", b"".join(whole.splitlines(keepends=True)[:-3]),
                                 "the members' last evaluations hold different numbers of images (fcn 8, unet 8, deconv 5)")):
        copy = tmp_path / name / "tiny" / "20261120-000000"
        shutil.copytree(finished, copy)
        (copy / "val_scores.csv").write_bytes(content)
        rebuilt = run_main("report", copy)
        assert rebuilt.returncode == 2 and said in rebuilt.stderr, rebuilt.stderr
        assert "Traceback" not in rebuilt.stderr


def test_report_refuses_to_rebuild_without_a_score_table_the_summary_was_built_from(results, tmp_path):
    """A deleted val_scores.csv rebuilt summary.csv without its 12 selected_val_* columns, and
    without the intervals' image part, and said nothing; nothing is rewritten now."""
    import shutil

    finished = next((results / "tiny").glob("2*"))
    copy = tmp_path / "tiny" / "20261120-000000"
    shutil.copytree(finished, copy)
    (copy / "val_scores.csv").unlink()
    before = {p.name: p.read_bytes() for p in copy.iterdir() if p.is_file()}
    refused = run_main("report", copy)
    assert refused.returncode == 2 and "val_scores.csv: every validation image's scores" in refused.stderr, refused.stderr
    assert {p.name: p.read_bytes() for p in copy.iterdir() if p.is_file()} == before


def test_a_run_named_from_inside_it_is_labelled_by_its_experiment_and_id(results, monkeypatch):
    """`harness compare .` in a run directory labelled it "/" with an empty experiment column."""
    finished = next((results / "tiny").glob("2*"))
    monkeypatch.chdir(finished)
    compared = run_main("compare", ".", "--json")
    assert compared.returncode == 0, compared.stderr
    rows = json.loads(compared.stdout)
    assert {(r["run"], r["name"], r["run_id"]) for r in rows} == {(f"tiny/{finished.name}", "tiny", finished.name)}
    monkeypatch.chdir(finished.parent)
    assert {r["run"] for r in json.loads(run_main("compare", finished.name, "--json").stdout)} == {f"tiny/{finished.name}"}


def test_runs_lists_a_run_whose_run_json_is_damaged_as_unreadable_with_no_made_up_figures(results, tmp_path):
    import shutil

    copy = tmp_path / "results" / "tiny" / "20261120-000000"
    shutil.copytree(next((results / "tiny").glob("2*")), copy)
    (copy / "run.json").write_text('{"status": 5}')
    listed = run_main("runs", "--results", tmp_path / "results")
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if "20261120-000000" in line)
    assert "unreadable run.json" in row and "nan" not in row.lower()


def test_runs_names_no_best_model_for_a_run_none_of_whose_models_finished(results, tmp_path):
    """Every model diverged: the run named the first of them its best (`fcn (test_loss 3.6068)`)."""

    copy = tmp_path / "results" / "tiny" / "20261120-000000"
    shutil.copytree(next((results / "tiny").glob("2*")), copy)
    summary = read_csv(copy / "summary.csv")
    summary.assign(status="diverged").to_csv(copy / "summary.csv", index=False)
    (row,) = json.loads(run_main("runs", "--results", tmp_path / "results", "--json").stdout)
    assert row["best"] == "none finished" and row["best_value"] is None
    printed = run_main("runs", "--results", tmp_path / "results").stdout
    assert "none finished" in printed and "<NA>" not in printed and "nan" not in printed.lower()


def test_runs_says_a_completed_runs_summary_is_gone_or_damaged_rather_than_showing_no_best(results, tmp_path):
    """Both showed `-` as the best, as for a run still training."""
    made = next((results / "tiny").glob("2*"))
    for run_id, damage in (("20261120-000000", "missing"), ("20261121-000000", "garbage\n")):
        copy = tmp_path / "results" / "tiny" / run_id
        shutil.copytree(made, copy)
        if damage == "missing":
            (copy / "summary.csv").unlink()
        else:
            (copy / "summary.csv").write_text(damage)
    rows = {row["run_id"]: row for row in json.loads(run_main("runs", "--results", tmp_path / "results", "--json").stdout)}
    assert rows["20261120-000000"]["best"] == "no summary.csv" and rows["20261121-000000"]["best"] == "unreadable summary.csv"
    assert all(row["best_value"] is None for row in rows.values())


def test_an_output_folder_that_cannot_be_made_is_named_with_its_option_not_a_crash(results, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("mine")
    run_dir = next((results / "tiny").iterdir())
    config = write_yaml(tmp_path / "c.yaml", tiny_config(train={"epochs": 1}))
    for command, said in ((("run", config, "--results", blocker / "r"), "the results folder (--results DIR, output.results_dir)"),
                          (("export-batches", run_dir, "--steps", "1", "--out", blocker / "e"), "export-batches --out"),
                          (("sample-data", blocker / "d"), "sample-data OUT:"),
                          (("plan", config, "--results", blocker / "p"), "the results folder"),
                          (("nightly", config, "--results", blocker / "n"), "the results folder")):
        refused = run_main(*command)
        assert refused.returncode == 2 and said in refused.stderr and "cannot be made a folder" in refused.stderr, refused.stderr
    assert blocker.read_text() == "mine"


def test_compare_marks_no_best_timing_between_runs_on_different_machines():
    """ms_per_step of a run on a 2-core VM against one on a GPU box measures the machines: no bold
    best for timings there, and the note names both machines; params and scores are unaffected."""
    import pandas as pd

    from harness.outputs.compare import best_index, comparison_note

    rows = [{"run": "r0", "model": "a", "ms_per_step": 900.0, "params": 10, "val_iou": 0.5, "repeats": 3, "machine": "vm: Xeon x2, no GPU"},
            {"run": "r1", "model": "a", "ms_per_step": 30.0, "params": 20, "val_iou": 0.6, "repeats": 3, "machine": "gpu-box: EPYC x64, A100"}]
    across = pd.DataFrame(rows)
    assert best_index(across, "ms_per_step") is None
    assert best_index(across, "params") == 0 and best_index(across, "val_iou") == 1
    assert "timed on different machines (r0 on vm: Xeon x2, no GPU; r1 on gpu-box: EPYC x64, A100)" in comparison_note(across)
    one_machine = across.assign(machine=["vm: Xeon x2, no GPU", ""])  # "": a run recorded before run.json said its machine
    assert best_index(one_machine, "ms_per_step") == 1 and "different machines" not in comparison_note(one_machine)


def test_compare_marks_no_best_loss_between_models_trained_on_different_losses():
    """An autoencoder's MSE beside a unet's bce+dice marked the autoencoder's val_loss best in bold
    green (0.0064 against 0.63-1.18): no best of a model's own loss where the losses differ, and the
    note says why; scores and the losses of models that share one are marked as before."""
    import pandas as pd

    from harness.outputs.compare import best_index, comparison_note

    rows = [{"run": "ae", "model": "small", "kind": "autoencoder", "loss": "mse", "val_loss": 0.0064, "best_val_loss": 0.0064, "val_iou": None},
            {"run": "s", "model": "unet", "kind": "supervised", "loss": "bce+dice", "val_loss": 1.18, "best_val_loss": 1.18, "val_iou": 0.46},
            {"run": "s", "model": "deconv", "kind": "supervised", "loss": "focal+dice", "val_loss": 0.63, "best_val_loss": 0.63, "val_iou": 0.37}]
    table = pd.DataFrame(rows)
    assert best_index(table, "val_loss") is None and best_index(table, "best_val_loss") is None
    assert best_index(table, "val_iou") == 1
    assert "trained on different losses (autoencoder's loss, bce+dice, focal+dice)" in comparison_note(table)
    same = table.assign(kind="supervised", loss="bce+dice")
    assert best_index(same, "val_loss") == 0 and "different losses" not in comparison_note(same)
    gan = same.assign(kind=["gan", "supervised", "supervised"])  # a generator trains on its adversarial loss plus L1
    assert best_index(gan, "val_loss") is None and best_index(gan.iloc[1:], "val_loss") == 2


def test_a_run_whose_groups_ran_on_several_machines_names_each_models_machine(tmp_path):
    """Ray placed one group on a VM and one on a GPU box: the run's own timings are two machines'.
    compare names each model's (its group's) machine and marks no best among them."""
    from harness.outputs.compare import best_index, compare_runs, comparison_note
    from harness.rundir import RunDir, RunRecord
    from harness.rundir.hardware import common_machine

    vm, box = {"host": "vm", "cpu": "Xeon", "cpus": 2, "gpus": []}, {"host": "gpu-box", "cpu": "EPYC", "cpus": 64, "gpus": ["A100"]}
    run = RunDir(tmp_path / "x" / "r0")
    run.path.mkdir(parents=True)
    groups = [{"name": "g1", "models": ["a", "b"], "status": "completed", "hardware": vm},
              {"name": "g2", "models": ["c"], "status": "completed", "hardware": box}]
    run.write_record(RunRecord(name="x", run_id="r0", hardware=common_machine([g["hardware"] for g in groups]), groups=groups))
    (run.path / "summary.csv").write_text("model,status,ms_per_step,params\na,ok,900.0,10\nb,ok,800.0,20\nc,ok,30.0,30\n")
    table = compare_runs([run.path])
    assert list(table["machine"]) == ["vm: Xeon x2, no GPU"] * 2 + ["gpu-box: EPYC x64, A100"]
    assert best_index(table, "ms_per_step") is None and best_index(table, "params") == 0
    assert "timed on different machines (x/r0's a, b on vm: Xeon x2, no GPU; x/r0's c on gpu-box: EPYC x64, A100)" in comparison_note(table)


def test_compare_shows_what_each_model_costs_to_serve_and_judges_latency_as_a_timing(tmp_path):
    """compare listed params and ms_per_step only: a model's serving latency, throughput, memory,
    FLOPs and file size, in every run's summary.csv, were in no column of it, not even --json."""
    import io

    from rich.console import Console

    from harness.outputs.compare import best_index, compare_runs, print_comparison
    from harness.rundir import RunDir, RunRecord

    runs = []
    for run_id, host, latency in (("r0", "vm", 19.2), ("r1", "gpu-box", 2.1)):
        run = RunDir(tmp_path / "x" / run_id)
        run.path.mkdir(parents=True)
        run.write_record(RunRecord(name="x", run_id=run_id, hardware={"host": host, "cpu": "Xeon", "cpus": 2, "gpus": []}))
        (run.path / "summary.csv").write_text("model,status,params,flops_per_example,ms_per_step,latency_ms,latency_p90_ms,serve_images_per_s,serve_peak_mb,model_mb,val_iou\n"
                                              f"unet,ok,14300000,3.1e9,556.9,{latency},22.0,78.4,0.0,55.1,0.88\n")
        runs.append(run.path)
    table = compare_runs(runs)
    assert {"flops_per_example", "latency_ms", "latency_p90_ms", "serve_images_per_s", "serve_peak_mb", "model_mb"} <= set(table.columns)
    assert best_index(table, "latency_ms") is None and best_index(table, "model_mb") == 0  # timings of two machines; a file size is the model's
    out = io.StringIO()
    print_comparison(table, Console(file=out, width=140))
    assert "latency_ms" in out.getvalue()


def test_compare_shows_each_classs_own_scores_after_the_means(tmp_path):
    """With data.classes above 1, which class a model gets wrong was in summary.csv only: compare
    kept none of its per-class columns, not even in --json."""
    import io

    from rich.console import Console

    from harness.outputs.compare import best_index, compare_runs, print_comparison
    from harness.rundir import RunDir, RunRecord

    runs = []
    for run_id, c1 in (("r0", 0.61), ("r1", 0.12)):
        run = RunDir(tmp_path / "x" / run_id)
        run.path.mkdir(parents=True)
        run.write_record(RunRecord(name="x", run_id=run_id))
        (run.path / "summary.csv").write_text("model,status,val_iou,val_iou_c1,val_iou_c1_low,val_iou_c2,test_iou,test_iou_c1,test_iou_c2,selected_val_iou_c1,repeats\n"
                                              f"unet,ok,0.4,{c1},0.1,0.3,0.41,{c1},0.3,0.5,1\n")
        runs.append(run.path)
    table = compare_runs(runs)
    columns = list(table.columns)
    assert columns[columns.index("test_iou") + 1:columns.index("repeats")] == ["val_iou_c1", "val_iou_c2", "test_iou_c1", "test_iou_c2"]
    assert best_index(table, "test_iou_c1") == 0
    out = io.StringIO()
    print_comparison(table, Console(file=out, width=200))
    assert "test_iou_c1" in out.getvalue()


def test_compare_says_whose_image_noise_one_seed_intervals_cover():
    """A one-seed run ranked on a test split has intervals of test-image noise, not validation's."""
    import pandas as pd

    from harness.outputs.compare import comparison_note
    from harness.outputs.statistics import images_only, seeds_and_images

    def table(*covers_and_repeats):
        return pd.DataFrame([{"run": f"r{i}", "interval_covers": c, "repeats": r} for i, (c, r) in enumerate(covers_and_repeats)])

    assert "cover validation-image noise only" in comparison_note(table((images_only("val"), 1)))
    assert "cover test-image noise only" in comparison_note(table((images_only("test"), 1), (seeds_and_images("val"), 3)))
    assert "cover validation-image or test-image noise only" in comparison_note(table((images_only("test"), 1), (images_only("val"), 1)))
    assert "one training seed" not in comparison_note(table((seeds_and_images("test"), 3)))
    # A run still training (no summary yet: no repeats, no intervals) was called a one-seed run, with 3 seeds.
    from harness.outputs.compare import FINISHED

    running = pd.DataFrame([{"run": "r0", "model": "unet@1", "compared_on": "last evaluation so far: running at step 126/1800"},
                            {"run": "r1", "model": "unet", "compared_on": FINISHED, "repeats": 3, "interval_covers": seeds_and_images("val")}])
    note = comparison_note(running)
    assert "one training seed" not in note and "Not finished, compared on each member's last evaluation so far (per member, no intervals): r0" in note


def test_a_summary_of_many_columns_is_compared_without_pandas_warnings(tmp_path):
    """A summary.csv of 121 columns (3 classes, repeats: each class's scores with their spread)
    made `harness compare` print pandas' PerformanceWarning at each column it added: the reader
    makes one block per column."""
    import warnings

    import pandas as pd

    from harness.outputs.compare import compare_runs
    from harness.rundir import RunDir, RunRecord

    run = tmp_path / "tiny" / "20261127-000000"
    RunDir(run).write_record(RunRecord(name="tiny", run_id=run.name))
    wide = {"model": ["a", "b"], "status": ["ok", "ok"], **{f"val_iou_c{i}_x{j}": [0.5, 0.6] for i in range(30) for j in range(4)}}
    pd.DataFrame(wide).to_csv(run / "summary.csv", index=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = compare_runs([run])
    assert list(table["model"]) == ["a", "b"]


def test_the_apis_compare_takes_one_run_as_a_string_and_names_an_empty_list(results):
    # A notebook's harness.compare("results/smoke/2026...") was read character by character
    # ("compare: / is given twice"), and harness.compare([]) raised pandas' "No objects to concatenate".
    import harness
    from harness.errors import ConfigError

    run = next(p for p in (results / "tiny").iterdir() if (p / "run.json").exists())
    assert harness.compare(str(run)).equals(harness.compare([run]))
    with pytest.raises(ConfigError, match="harness.compare: no run directories given"):
        harness.compare([])
    with pytest.raises(ConfigError, match="compare --pairs compares models of different runs"):
        harness.compare_pairs(run)


def test_compare_shows_the_column_the_runs_ranked_by_after_the_model(tmp_path):
    """A run ranked by test_loss was shown by test_iou and val_iou first, and at 80 columns its
    ranking column was cut from the table."""
    import io

    from rich.console import Console

    from harness.outputs.compare import compare_runs, print_comparison, ranking_columns
    from harness.rundir import RunDir, RunRecord

    run = RunDir(tmp_path / "x" / "r0")
    run.path.mkdir(parents=True)
    run.write_record(RunRecord(name="x", run_id="r0", status="completed", extra={"test": {"members": {"unet": {"weights": "best", "step": 4}}}}))
    write_yaml(run.config_file, tiny_config(data={"test_size": 8}, output={"rank_by": "val_loss"}))
    (run.path / "summary.csv").write_text("model,status,params,ms_per_step,latency_ms,val_loss,val_iou,test_loss,test_iou\n"
                                          "unet,diverged,14300000,556.9,19.2,0.31,0.88,0.2975,0.87\n")
    assert ranking_columns([run.path, tmp_path / "not_a_run"]) == ["test_loss"]  # val_loss on the test split; a folder without config adds none
    out = io.StringIO()
    print_comparison(compare_runs([run.path]), Console(file=out, width=80), ranked_by=ranking_columns([run.path]))
    header = next(line for line in out.getvalue().splitlines() if "model" in line)
    assert re.search(r"model\s*┃\s*test_loss\s*┃\s*status", header), header
    assert "0.2975" in out.getvalue() and "diverged" in out.getvalue()


def test_a_run_in_groups_stopped_before_merging_them_is_told_not_crashed_on(tmp_path):
    """An interrupted run of two groups holds its groups' folders and no table at its top (they are
    merged when every group is done): `harness report` of it crashed (KeyError 'best_step', exit 1),
    `compare` called it no run directory, `harness.load_run` gave 0 models, `runs` listed 0 members,
    and a group's own report said to resume the group's folder, not the run."""
    import harness
    from harness.errors import ConfigError
    from harness.outputs.compare import compare_runs
    from harness.outputs.derived import rebuild, unfinished_note
    from harness.outputs.runs import list_runs
    from harness.rundir import RunDir, RunRecord

    run = RunDir(tmp_path / "results" / "gr" / "20261129-104107")
    groups = [{"name": "g1", "members": ["fcn", "fcn2"], "status": "completed", "steps_done": 960},
              {"name": "g2", "members": ["unet", "deconv"], "status": "interrupted", "steps_done": 98}]
    run.path.mkdir(parents=True)
    write_yaml(run.config_file, tiny_config())
    run.write_record(RunRecord(name="gr", run_id=run.run_id, status="interrupted", total_steps=960, steps_done=98, groups=groups))
    g2 = run.group("g2")
    g2.path.mkdir(parents=True)
    g2.write_record(RunRecord(name="gr", run_id="g2", status="interrupted", total_steps=960, steps_done=98))
    told = f"trains in groups and merges their tables, models and report when every group is done; it stopped before " \
           f"(g1 completed, g2 interrupted at step 98): harness resume {run.path} finishes it"
    with pytest.raises(ConfigError, match=re.escape(told)) as refused:
        rebuild(run.path)
    assert refused.value.exit_code == 2 and f"harness report {run.group('g1').path}" in str(refused.value)
    with pytest.raises(ConfigError, match=re.escape(told)):
        compare_runs([run.path])
    with pytest.raises(ConfigError, match=re.escape(told)):
        harness.load_run(run.path)  # it gave a result of 0 models, saying nothing
    assert list_runs(tmp_path / "results")["members"].tolist() == [4]
    assert g2.resumed_from == run.path and run.resumed_from == run.path
    assert unfinished_note(g2.path).endswith(f"harness resume {run.path} continues it.")


def _ranked_run(folder, rank_by: str, summary: list[dict], pairs: list[dict], declared=()) -> None:
    """A finished run's record and tables as a run writes them, for `runs` to read (no training)."""
    import pandas as pd

    from harness.rundir import MemberRecord, RunDir, RunRecord

    run = RunDir(folder / "results" / "lead" / "20261206-120000")
    run.path.mkdir(parents=True)
    models = {f"{row['model']}@1": MemberRecord(higher_is_better=list(declared)) for row in summary}
    run.write_record(RunRecord(name="lead", run_id=run.run_id, status="completed", total_steps=8, steps_done=8,
                               config={"output": {"rank_by": rank_by}}, models=models))
    pd.DataFrame(summary).to_csv(run.summary_csv, index=False)
    if pairs is not None:
        pd.DataFrame(pairs, columns=["model_a", "model_b", "metric", "diff", "supported"]).to_csv(run.path / "pairs.csv", index=False)


@pytest.mark.parametrize("rank_by, diffs, said", [
    ("val_iou", (-0.05, +0.01), (1, 2)),      # higher is better: fcn - unet < 0 is unet's lead, supported
    ("val_loss", (+0.05, -0.01), (1, 2)),     # lower is better: fcn - unet > 0 is unet's lead
    ("val_loss", (-0.05, -0.01), (0, 2)),     # a supported difference against the leader is no support for it
    ("val_psnr", (-0.05, +0.01), (1, 2)),     # a metric a member kind declared higher-is-better (run.json)
])
def test_runs_says_over_how_many_of_the_models_compared_with_it_the_best_ones_lead_is_supported(tmp_path, monkeypatch, rank_by, diffs, said):
    """`harness runs` named a best model with nothing on how sure its lead is: a 3-seed run whose
    verdict supported no difference read exactly like one that supported them all."""
    summary = [{"rank": r, "model": m, rank_by: v, "status": "ok", "repeats": 3} for r, (m, v) in enumerate([("unet", 0.5), ("fcn", 0.4), ("deconv", 0.3)], 1)]
    pairs = [{"model_a": "fcn", "model_b": "unet", "metric": rank_by, "diff": diffs[0], "supported": True},
             {"model_a": "unet", "model_b": "deconv", "metric": rank_by, "diff": diffs[1], "supported": False},
             {"model_a": "fcn", "model_b": "deconv", "metric": rank_by, "diff": 0.1, "supported": True},      # not the leader's
             {"model_a": "unet", "model_b": "deconv", "metric": "val_f1", "diff": 0.1, "supported": True}]   # not the ranking's
    _ranked_run(tmp_path, rank_by, summary, pairs, declared=["psnr"] if rank_by == "val_psnr" else [])
    monkeypatch.setenv("COLUMNS", "160")  # wide enough for every column
    (row,) = json.loads(run_main("runs", "--results", tmp_path / "results", "--json").stdout)
    assert (row["best"], row["repeats"], row["lead_supported_over"], row["lead_compared_with"]) == ("unet", 3, *said)
    printed = run_main("runs", "--results", tmp_path / "results").stdout
    assert "lead supported" in printed and f"{said[0]} of {said[1]}" in printed


def test_runs_says_a_one_seed_runs_lead_is_untested_and_names_nothing_without_pairs(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")  # wide enough for every column
    summary = [{"rank": 1, "model": "unet", "val_iou": 0.5, "status": "ok", "repeats": 1}, {"rank": 2, "model": "fcn", "val_iou": 0.4, "status": "ok", "repeats": 1}]
    _ranked_run(tmp_path / "one", "val_iou", summary, [{"model_a": "fcn", "model_b": "unet", "metric": "val_iou", "diff": -0.1, "supported": False}])
    printed = run_main("runs", "--results", tmp_path / "one" / "results").stdout
    assert "one seed" in printed
    _ranked_run(tmp_path / "none", "val_iou", summary, None)  # pairs.csv gone: nothing made up
    (row,) = json.loads(run_main("runs", "--results", tmp_path / "none" / "results", "--json").stdout)
    assert row["lead_supported_over"] is None and row["lead_compared_with"] is None
    assert " - " in run_main("runs", "--results", tmp_path / "none" / "results").stdout
