"""The README's Python example, run as written there, and docs/api.md's, run with a smaller
experiment (from a folder holding the experiments they name, so that their relative paths resolve
as they would in a checkout)."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest
from conftest import REPO, page_blocks


def readme_python(page: str = "README.md") -> str:
    (code,) = page_blocks(page, "python")
    return code


@pytest.mark.slow
def test_the_readmes_python_example_runs_as_written(tmp_path, monkeypatch):
    (tmp_path / "experiments").mkdir()
    shutil.copy(REPO / "experiments" / "smoke.yaml", tmp_path / "experiments")
    monkeypatch.chdir(tmp_path)
    names: dict = {}
    exec(compile(readme_python(), "README.md", "exec"), names)
    result, old = names["result"], names["old"]
    assert result.info["status"] == "completed" and len(result.summary) == 3
    assert result.run_dir.resolve().parent.parent == (tmp_path / "results").resolve()
    pd.testing.assert_frame_equal(old.summary, result.summary)
    assert names["harness"].compare([old.run_dir])["model"].tolist() == result.summary["model"].tolist()


@pytest.mark.slow
def test_the_api_pages_example_runs_with_smoke_in_place_of_the_quickstart(tmp_path, monkeypatch):
    """Every call and attribute docs/api.md shows, in its order (34 s). Two changes to the text:
    smoke in place of the quickstart (minutes), and the dated run it loads made by a second run.
    The page once rebound `config` to a one-model dict before `harness.run(config)`, so the
    `result.models["unet"]` it showed next raised a KeyError for a user who ran it."""
    (tmp_path / "experiments").mkdir()
    shutil.copy(REPO / "experiments" / "smoke.yaml", tmp_path / "experiments")
    monkeypatch.chdir(tmp_path)
    code = readme_python("docs/api.md")
    for shown, instead in (("experiments/quickstart.yaml", "experiments/smoke.yaml"),
                           ('"results/quickstart/20261121-081856"', 'harness.run(config, results_dir="results").run_dir')):
        assert code.count(shown) == 1, shown
        code = code.replace(shown, instead)
    names: dict = {}
    exec(compile(code, "docs/api.md", "exec"), names)
    result, old, night = names["result"], names["old"], names["night"]
    assert result.info["status"] == old.info["status"] == "completed" and result.run_dir != old.run_dir
    assert list(result.models) == ["fcn", "unet", "deconv"] and names["variant"].train.epochs == 3
    assert night.exit_code == 0 and len(names["across"].pairs) > 0
