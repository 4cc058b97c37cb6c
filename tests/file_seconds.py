"""How long each test file took in a whole-suite run, so that the suite starts the longest first.

Under `--dist loadfile` (CI) a file is the unit a worker takes, in collection order; run in
alphabetical order, the longest file could start last and leave the other worker idle for minutes.
conftest.py orders the files by the seconds in file_seconds.json, longest first (the classic
longest-job-first rule), and keeps each file's own order. The figures only order the files:
a stale or missing entry changes how well the two workers are balanced, never what is tested.

Refresh after a whole-suite run written with `--junitxml`:

    python -m pytest -n 2 --dist loadfile --no-loadscope-reorder --junitxml=/tmp/suite.xml
    python tests/file_seconds.py /tmp/suite.xml
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from pathlib import Path

TABLE = Path(__file__).with_name("file_seconds.json")


def load() -> dict[str, float]:
    """{test file relative to the repository: seconds}; empty when the table is missing or broken."""
    try:
        return {str(k): float(v) for k, v in json.loads(TABLE.read_text()).items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def longest_first(items: list, seconds: dict[str, float]) -> list:
    """The items with their files in decreasing recorded seconds (unknown files last, in their
    collection order); each file's items stay together and in their order."""
    files: dict[str, list] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::")[0], []).append(item)
    order = sorted(files, key=lambda name: -seconds.get(name, 0.0))  # sorted() is stable
    return [item for name in order for item in files[name]]


def from_junit(path: Path) -> dict[str, float]:
    """Seconds per test file from a pytest junit XML (each test's setup, call and teardown)."""
    totals: dict[str, float] = defaultdict(float)
    for case in ElementTree.parse(path).iter("testcase"):
        module = case.get("classname", "").split(".")
        # classname is the module's dotted path, then the class if there is one
        parts = module if module[-1].startswith("test_") else module[:-1]
        totals["/".join(parts) + ".py"] += float(case.get("time", 0))
    return {name: round(total, 1) for name, total in sorted(totals.items(), key=lambda kv: -kv[1])}


if __name__ == "__main__":
    TABLE.write_text(json.dumps(from_junit(Path(sys.argv[1])), indent=1) + "\n")
    print(f"wrote {TABLE}")
