"""The README's Python example, run as written there (from a folder holding the experiment it
names, so that its relative paths resolve as they would in a checkout)."""

from __future__ import annotations

import re
import shutil

import pandas as pd
import pytest
from conftest import REPO


def readme_python() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    (code,) = re.findall(r"```python\n(.*?)```", text, flags=re.S)
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
