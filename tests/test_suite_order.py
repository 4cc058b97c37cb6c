"""The suite's own scheduling: files ordered longest first, from a whole-suite junit XML."""

from __future__ import annotations

from types import SimpleNamespace

import file_seconds


def _items(*nodeids):
    return [SimpleNamespace(nodeid=n) for n in nodeids]


def test_files_run_longest_first_and_each_keeps_its_order():
    items = _items("tests/a.py::one", "tests/b.py::one", "tests/a.py::two", "tests/new.py::x", "tests/c.py::one", "tests/b.py::two")
    ordered = file_seconds.longest_first(items, {"tests/a.py": 5.0, "tests/b.py": 50.0, "tests/c.py": 20.0})
    assert [i.nodeid for i in ordered] == [
        "tests/b.py::one", "tests/b.py::two", "tests/c.py::one", "tests/a.py::one", "tests/a.py::two", "tests/new.py::x",
    ]


def test_seconds_per_file_add_up_from_a_junit_report(tmp_path, monkeypatch):
    report = tmp_path / "suite.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.test_a" name="t1" time="1.5"/>'
        '<testcase classname="tests.test_a" name="t2" time="2.0"/>'
        '<testcase classname="tests.faults.test_b" name="t1" time="9.25"/>'
        '<testcase classname="tests.test_c.TestThing" name="t1" time="0.5"/>'
        "</testsuite></testsuites>"
    )
    assert file_seconds.from_junit(report) == {"tests/faults/test_b.py": 9.2, "tests/test_a.py": 3.5, "tests/test_c.py": 0.5}
    monkeypatch.setattr(file_seconds, "TABLE", tmp_path / "missing.json")
    assert file_seconds.load() == {}
