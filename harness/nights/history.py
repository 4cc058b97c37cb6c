"""The history of an experiment: an SQLite database beside its runs, `results/<name>/history.sqlite`.

One row per (run, model, metric) in `metrics`, one row per run in `runs` (versions, git commit,
devices, config fingerprint), `nights` (which run is a given night's, registered when it starts, so
an interrupted night is resumed rather than started again) and `pins` (the baseline).

Every write is one transaction in WAL mode with synchronous=FULL: a process killed mid-write
leaves the database as it was before that write began (SQLite's journal rolls the partial
transaction back on the next open), never half a run.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pandas as pd

from harness.errors import ConfigError, DataError
from harness.rundir import utc_now
from harness.rundir import version_changes as changes_between  # the method below has its name

HISTORY_FILE = "history.sqlite"
_OLDEST_FIRST = "COALESCE(night, ''), started, run_id"  # the runs' order everywhere: by night, then start
SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    night TEXT,
    status TEXT NOT NULL,
    started TEXT,
    ended TEXT,
    recorded TEXT NOT NULL,
    fingerprint TEXT,
    git_commit TEXT,
    versions TEXT,
    devices TEXT,
    placement TEXT,
    run_dir TEXT,
    regressions INTEGER
);
CREATE TABLE IF NOT EXISTS models (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    model TEXT NOT NULL,
    status TEXT NOT NULL,
    PRIMARY KEY (run_id, model)
);
CREATE TABLE IF NOT EXISTS metrics (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    model TEXT NOT NULL,
    metric TEXT NOT NULL,
    value REAL,
    PRIMARY KEY (run_id, model, metric)
);
CREATE TABLE IF NOT EXISTS alerts (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    against TEXT NOT NULL,
    against_run TEXT NOT NULL,
    model TEXT NOT NULL,
    metric TEXT NOT NULL,
    before REAL,
    now REAL,
    allowed TEXT,
    PRIMARY KEY (run_id, against, model, metric)
);
CREATE TABLE IF NOT EXISTS race_rungs (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    rung INTEGER NOT NULL,
    epoch INTEGER,
    models_finished INTEGER,
    spearman REAL,
    PRIMARY KEY (run_id, rung)
);
CREATE TABLE IF NOT EXISTS nights (night TEXT PRIMARY KEY, run_id TEXT NOT NULL, registered TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS pins (slot TEXT PRIMARY KEY, run_id TEXT NOT NULL, pinned TEXT NOT NULL);
"""


@dataclass(frozen=True)
class RunRecord:
    """One run as the history knows it."""

    run_id: str
    night: str | None
    status: str
    fingerprint: str | None
    git_commit: str | None
    run_dir: str | None
    regressions: int | None


@dataclass(frozen=True)
class RunMeasurements:
    """What a finished run adds to the history."""

    record: RunRecord
    started: str | None
    ended: str | None
    versions: dict[str, Any]
    devices: list[str]
    placement: dict[str, Any]
    model_status: dict[str, str]
    metrics: dict[tuple[str, str], float]  # (model, metric) -> value
    # A race's rungs: {rung, epoch, models_finished, spearman} (run.json race.correlations)
    race: tuple[dict[str, Any], ...] = ()


class HistoryStore:
    def __init__(self, path: Path):
        self.path = Path(path)

    @classmethod
    def beside(cls, experiment_dir: Path) -> "HistoryStore":
        return cls(Path(experiment_dir) / HISTORY_FILE)

    # -- connection ------------------------------------------------------------------------------

    @contextmanager
    def _connect(self, write: bool = False) -> Iterator[sqlite3.Connection]:
        if not write and not self.path.exists():
            raise ConfigError(f"no history at {self.path}: `harness nightly CONFIG` creates it on its first night")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        except sqlite3.Error as exc:
            raise self._unreadable(exc) from None
        try:
            conn.execute("PRAGMA busy_timeout = 30000")
            if write:
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = FULL")
                conn.executescript(_SCHEMA)
                conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            yield conn
        except sqlite3.DatabaseError as exc:
            raise self._unreadable(exc) from None
        finally:
            conn.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """All or nothing: BEGIN IMMEDIATE takes the write lock up front, so two writers queue
        instead of failing half-way."""
        with self._connect(write=True) as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def _unreadable(self, exc: Exception) -> DataError:
        return DataError(
            f"the history database {self.path} cannot be used: {exc}. It was left as it is; move it "
            "aside to start a new history (the runs' own folders still hold every table)."
        )

    # -- writes ---------------------------------------------------------------------------------

    def register_night(self, night: str, run_id: str) -> None:
        with self._transaction() as conn:
            conn.execute("INSERT OR REPLACE INTO nights VALUES (?, ?, ?)", (night, run_id, utc_now()))

    def record_run(self, run: RunMeasurements) -> None:
        """Add (or replace: recording the same run twice never duplicates rows) one run."""
        r = run.record
        with self._transaction() as conn:
            for table in ("alerts", "metrics", "models", "race_rungs", "runs"):
                conn.execute(f"DELETE FROM {table} WHERE run_id = ?", (r.run_id,))
            conn.execute(
                "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    r.run_id, r.night, r.status, run.started, run.ended, utc_now(), r.fingerprint,
                    r.git_commit, json.dumps(run.versions), json.dumps(run.devices),
                    json.dumps(run.placement), r.run_dir, r.regressions,
                ),
            )
            conn.executemany("INSERT INTO models VALUES (?, ?, ?)", [(r.run_id, m, s) for m, s in run.model_status.items()])
            conn.executemany(
                "INSERT INTO metrics VALUES (?, ?, ?, ?)",
                [(r.run_id, model, metric, _real(value)) for (model, metric), value in run.metrics.items()],
            )
            conn.executemany(
                "INSERT INTO race_rungs VALUES (?, ?, ?, ?, ?)",
                [(r.run_id, c["rung"], c.get("epoch"), c.get("models_finished"), _real(c.get("spearman"))) for c in run.race],
            )

    def set_verdict(self, run_id: str, regressions: list[tuple]) -> None:
        """The regressions found for a run: (against, against_run, model, metric, before, now,
        allowed) each. Replaces an earlier verdict (the baseline may have been re-pinned)."""
        with self._transaction() as conn:
            conn.execute("DELETE FROM alerts WHERE run_id = ?", (run_id,))
            conn.executemany(
                "INSERT OR REPLACE INTO alerts VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [(run_id, a, ar, m, k, _real(b), _real(n), al) for a, ar, m, k, b, n, al in regressions],
            )
            conn.execute("UPDATE runs SET regressions = ? WHERE run_id = ?", (len(regressions), run_id))

    def alerts(self) -> set[tuple[str, str]]:
        """(model, run_id) pairs that regressed against something, over the whole history."""
        with self._connect() as conn:
            return {(m, r) for m, r in conn.execute("SELECT DISTINCT model, run_id FROM alerts")}

    def set_meta(self, key: str, value: Any) -> None:
        with self._transaction() as conn:
            conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))

    def meta(self, key: str, default: Any = None) -> Any:
        with self._connect() as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else default

    def pin(self, run_id: str) -> None:
        with self._transaction() as conn:
            if conn.execute("SELECT 1 FROM runs WHERE run_id = ? AND status = 'completed'", (run_id,)).fetchone() is None:
                known = [row[0] for row in conn.execute("SELECT run_id FROM runs WHERE status = 'completed' ORDER BY run_id")]
                raise ConfigError(
                    f"cannot pin {run_id!r}: it is not a completed run in {self.path}",
                    [f"completed runs: {', '.join(known) or '(none yet)'}"],
                )
            conn.execute("INSERT OR REPLACE INTO pins VALUES ('baseline', ?, ?)", (run_id, utc_now()))

    def unpin(self) -> None:
        with self._transaction() as conn:
            conn.execute("DELETE FROM pins WHERE slot = 'baseline'")

    # -- reads ----------------------------------------------------------------------------------

    def run_for_night(self, night: str) -> str | None:
        if not self.path.exists():
            return None
        with self._connect() as conn:
            row = conn.execute("SELECT run_id FROM nights WHERE night = ?", (night,)).fetchone()
        return row[0] if row else None

    def runs(self) -> list[RunRecord]:
        """Every recorded run, oldest first."""
        if not self.path.exists():
            return []
        with self._connect() as conn:
            rows = conn.execute(
                "SELECT run_id, night, status, fingerprint, git_commit, run_dir, regressions FROM runs "
                f"ORDER BY {_OLDEST_FIRST}"
            ).fetchall()
        return [RunRecord(*row) for row in rows]

    def get(self, run_id: str) -> RunRecord | None:
        return next((r for r in self.runs() if r.run_id == run_id), None)

    def baseline(self) -> str | None:
        if not self.path.exists():
            return None
        with self._connect() as conn:
            row = conn.execute("SELECT run_id FROM pins WHERE slot = 'baseline'").fetchone()
        return row[0] if row else None

    def previous_completed(self, night: str, excluding: str) -> RunRecord | None:
        """The newest completed run of an earlier night (or of this night, if recorded earlier)."""
        earlier = [r for r in self.runs() if r.status == "completed" and r.run_id != excluding and (r.night or "") <= night]
        return earlier[-1] if earlier else None

    def metrics_of(self, run_id: str) -> dict[tuple[str, str], float]:
        with self._connect() as conn:
            rows = conn.execute("SELECT model, metric, value FROM metrics WHERE run_id = ?", (run_id,)).fetchall()
        return {(model, metric): (float("nan") if value is None else value) for model, metric, value in rows}

    def versions_of(self, run_id: str) -> dict[str, Any]:
        """The versions the run recorded ({} when it recorded none)."""
        with self._connect() as conn:
            row = conn.execute("SELECT versions FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return recorded_versions(row[0] if row else None)

    def version_changes(self) -> dict[str, dict[str, str]]:
        """{run_id: {package: "2.20.0 -> 2.21.0"}} for each run whose recorded versions differ from
        the newest earlier run's that recorded any, in the history's order (the trend plots' order):
        the nights from which a score may have moved because the software did."""
        if not self.path.exists():
            return {}
        with self._connect() as conn:
            rows = conn.execute(f"SELECT run_id, versions FROM runs ORDER BY {_OLDEST_FIRST}").fetchall()
        changes, before = {}, {}
        for run_id, text in rows:
            versions = recorded_versions(text)
            changed = changes_between(before, versions)
            if changed:
                changes[run_id] = changed
            before = versions or before
        return changes

    def model_status_of(self, run_id: str) -> dict[str, str]:
        with self._connect() as conn:
            rows = conn.execute("SELECT model, status FROM models WHERE run_id = ?", (run_id,)).fetchall()
        return dict(rows)

    def table(self) -> pd.DataFrame:
        """The whole history, tidy: one row per (run, model, metric) with the run's facts."""
        with self._connect() as conn:
            cursor = conn.execute(
                "SELECT r.night, r.run_id, r.status AS run_status, r.git_commit, r.versions, r.fingerprint, "
                "r.regressions, m.model, m.metric, m.value FROM runs r LEFT JOIN metrics m USING (run_id) "
                "ORDER BY COALESCE(r.night, ''), r.started, r.run_id, m.model, m.metric"
            )
            columns = [d[0] for d in cursor.description]
            return pd.DataFrame(cursor.fetchall(), columns=columns)

    def race_table(self) -> pd.DataFrame:
        """Every recorded race rung: does an early ranking predict the final one, night after night?"""
        with self._connect() as conn:
            cursor = conn.execute(
                "SELECT r.night, g.run_id, g.rung, g.epoch, g.models_finished, g.spearman FROM race_rungs g "
                "JOIN runs r USING (run_id) ORDER BY COALESCE(r.night, ''), r.started, g.run_id, g.rung"
            )
            return pd.DataFrame(cursor.fetchall(), columns=[d[0] for d in cursor.description])

    def check(self) -> str:
        with self._connect() as conn:
            return conn.execute("PRAGMA integrity_check").fetchone()[0]


def recorded_versions(text: str | None) -> dict[str, Any]:
    """A run's `versions` as the history keeps them (JSON text), or {} when none or unreadable."""
    try:
        found = json.loads(text) if text else {}
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _real(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if number != number else number


def seeds_of_each_run(history: pd.DataFrame) -> pd.Series:
    """run_id -> the training seeds (`train.repeats`) its models' figures are means over, from
    summary.csv's `repeats` column (absent in runs made before it: left out)."""
    repeats = history[history["metric"] == "repeats"]
    return pd.to_numeric(repeats["value"], errors="coerce").groupby(repeats["run_id"]).max().dropna()
