"""Fault trials on the plan cache (results/.plan-cache/): an entry that is valid JSON but not an
object, empty, unreadable, or written by another version in another format. Each is measured
again, with a line saying so, never trusted and never a crash."""

from __future__ import annotations

import json

import pytest
from conftest import tiny_config, write_yaml

import harness

DAMAGE = {
    "a list, not an object": lambda path: path.write_text("[1, 2, 3]\n"),
    "empty": lambda path: path.write_text(""),
    "unreadable": lambda path: (path.unlink(), path.mkdir()),  # reading it fails with an OSError, even as root
    "another version's format": lambda path: path.write_text(json.dumps({"peak": 12.0, "ms": 3.0}) + "\n"),
}


@pytest.mark.slow
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_plan_cache_entry_is_measured_again(tmp_path, capsys, damage):
    config = write_yaml(tmp_path / "c.yaml", tiny_config(models=[{"name": "fcn", "arch": "tiny_fcn"}], placement={"max_members_per_group": 1}, output={"progress": "lines"}))
    first = harness.plan(config, results_dir=tmp_path / "r")
    (entry,) = (tmp_path / "r" / ".plan-cache").glob("*.json")
    truth = json.loads(entry.read_text())
    DAMAGE[damage](entry)
    again = harness.plan(config, results_dir=tmp_path / "r")
    said = capsys.readouterr()
    assert "damaged or from another version: measuring again" in said.err + said.out
    (model,) = again.models
    assert not model["cached"] and model["params"] == truth["params"] == first.models[0]["params"]
    if entry.is_dir():
        entry.rmdir()  # the unreadable entry stays in the way of the new one: measured each time, still no crash
        return
    third = harness.plan(config, results_dir=tmp_path / "r")
    assert third.models[0]["cached"], "the entry was written anew"
