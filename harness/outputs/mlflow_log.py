"""MLflow (optional: pip install "harness[mlflow]"): a parent MLflow run for the experiment run and
one child run per member, logged WHILE the run trains.

Order: the parent and child runs are created when training starts and their ids written to
run.json (`mlflow`) at once, so a resumed run logs into the same MLflow runs; every batch of rows
the run writes is logged with its real time; rows at or before the last step already logged (redone
after a resume) are not logged twice. At the end: each member's settings as params named by their
section (`optimizer.name`), with its model, repeat and training seed, and its row of the summary
as metrics (scores of the chosen weights, test scores, costs); each model's summary row on the
parent (`unet.test_iou`, `unet.test_iou_low`: across seeds with repeats); and the run's files as
artifacts (report.html, plots/, config.yaml, summary.csv, pairs.csv, compare_by.csv and
expected_best.csv when written; models/ with `output.mlflow.log_models`). A failure to log is a warning, never the run's failure: MLflow holds
a copy, the run directory the results.

Bounded in time: every request to a tracking server times out after `output.mlflow.timeout_s`
without retries (MLflow's own default retries a refused connection for minutes), and after the
first failure nothing more is sent for that run, at the end of the run included.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from harness.config.naming import repeat_facts
from harness.config.schema import ExperimentConfig
from harness.errors import ConfigError
from harness.outputs.columns import flat_settings, is_finite
from harness.outputs.tables import SETTINGS, failed, grid_columns, load_losses, load_summary
from harness.rundir.hardware import describe as describe_machine
from harness.rundir.record import RunRecord

BATCH = 900  # MLflow accepts at most 1000 metrics per log_batch call
ARTIFACTS = ("report.html", "config.yaml", "summary.csv", "pairs.csv", "compare_by.csv", "expected_best.csv", "plots")  # those a run has


def client_for(spec):
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise ConfigError('output.mlflow is set but MLflow is not installed: pip install "harness[mlflow]"') from None
    # Read by MLflow at each request; a user's own setting of either wins.
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(max(1, round(spec.timeout_s))))
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    if spec.tracking_uri.startswith("file:"):
        # MLflow 3 keeps its file store (no server, no database) behind an explicit opt-in. A
        # database URI (sqlite:///mlflow.db) works too, with the full `mlflow` package installed.
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return MlflowClient(tracking_uri=spec.tracking_uri)


def view_command(tracking_uri: str) -> str:
    """How to look at what was logged: MLflow's UI over the store (the UI is in the full `mlflow`
    package; MLflow 3 opens a file store only with MLFLOW_ALLOW_FILE_STORE=true), or the server."""
    if tracking_uri.startswith(("http://", "https://")):
        return f"open {tracking_uri} in a browser"
    if tracking_uri.startswith("file:"):
        folder = Path(tracking_uri.removeprefix("file://").removeprefix("file:")).resolve()
        return f"MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri {folder}  (the UI needs: pip install mlflow)"
    if tracking_uri.startswith("sqlite:///") and not tracking_uri.startswith("sqlite:////"):
        tracking_uri = "sqlite:///" + str(Path(tracking_uri.removeprefix("sqlite:///")).resolve())
    return f"mlflow ui --backend-store-uri {tracking_uri}"


def open_runs(client, config: ExperimentConfig, info: RunRecord, run_path: Path) -> dict[str, Any]:
    """The MLflow runs of this run: those run.json names (a resume), else new ones."""
    record = info.get("mlflow") or {}  # the MLflow run ids of an earlier process of this run
    if record.get("parent_run_id") and set(record.get("runs", {})) >= {m.name for m in config.member_specs()}:
        return record
    name = config.output.mlflow.experiment or config.name
    experiment = client.get_experiment_by_name(name)
    experiment_id = experiment.experiment_id if experiment else client.create_experiment(name)
    tags = {"harness.run_dir": str(run_path), "harness.run_id": info.run_id, "harness.fingerprint": info.config_fingerprint}
    if info.hardware:  # whose timings these are: MLflow's charts line up runs from any machine
        tags["harness.machine"] = describe_machine(info.hardware)
    parent_id = client.create_run(experiment_id, run_name=info.run_id, tags=tags).info.run_id
    children = {
        m.name: client.create_run(experiment_id, run_name=m.name, tags={**tags, "mlflow.parentRunId": parent_id, "harness.model": m.name}).info.run_id
        for m in config.member_specs()
    }
    return {"tracking_uri": config.output.mlflow.tracking_uri, "experiment_id": experiment_id, "parent_run_id": parent_id, "runs": children, "logged_through_step": 0}


def log_rows(client, record: dict[str, Any], rows: Sequence) -> None:
    """Rows of losses.csv as metrics `<split>_<metric>` at their step, timestamped now."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    done = record.get("logged_through_step", 0)
    by_member: dict[str, list] = {}
    for r in rows:
        if r.step > done and r.model in record["runs"]:
            by_member.setdefault(r.model, []).append(Metric(f"{r.split}_{r.metric}", float(r.value), now, int(r.step)))
    for member, metrics in by_member.items():
        _log_metrics(client, record["runs"][member], metrics)
    if rows:
        record["logged_through_step"] = max(done, max(r.step for r in rows))


class MlflowWriter:
    """A writer of the run's rows (beside losses.csv, TensorBoard, the terminal) into MLflow. Its
    first failure is a warning and switches it off; the run goes on."""

    def __init__(self, config: ExperimentConfig, info: RunRecord, run_path: Path, save_record):
        self.record: dict[str, Any] | None = None
        self.save_record = save_record  # record -> None: into run.json
        try:
            self.client = client_for(config.output.mlflow)
            self.record = open_runs(self.client, config, info, run_path)
            save_record(self.record)
        except ConfigError:
            raise
        except Exception as exc:  # MLflow raises its own and its backends' errors
            self._fail(exc)

    def write(self, rows: Sequence, step: int) -> None:
        if self.record is None:
            return
        try:
            log_rows(self.client, self.record, rows)
        except Exception as exc:
            self._fail(exc)

    def close(self) -> None:
        if self.record is not None:
            self.save_record(self.record)

    def _fail(self, exc: Exception) -> None:
        print(f"harness: warning: MLflow logging stopped, the run goes on: {_brief(exc)}", file=sys.stderr)
        self.record = None
        self.save_record({"error": _brief(exc), "stopped": "while training"})  # the end of the run sends nothing either


def finish_runs(run, config: ExperimentConfig, info: RunRecord) -> dict[str, Any]:
    """At the end: rows not logged live (a run of several groups is logged here, after the merge),
    params by section, cost figures, artifacts, and each MLflow run's final status."""
    from mlflow.entities import Metric, Param

    client = client_for(config.output.mlflow)
    record = open_runs(client, config, info, run.path)
    losses = load_losses(run.losses_csv)
    log_rows(client, record, list(losses.itertuples(index=False)))
    parent = record["parent_run_id"]
    client.log_batch(parent, params=[Param(k, _text(v)) for k, v in experiment_params(config, info).items()])
    specs = {m.name: m for m in config.member_specs()}
    now = int(time.time() * 1000)
    by_member, by_model = summary_figures(run, config, live=set(losses["split"] + "_" + losses["metric"]))
    _log_metrics(client, parent, [Metric(f"{model}.{k}", v, now, 0) for model, figures in by_model.items() for k, v in figures.items()])
    for member, child in record["runs"].items():
        facts = info.models[member].as_dict() if member in info.models else {}
        params = member_params(specs[member], config.seed) if member in specs else {}
        _log_metrics(client, child, [Metric(k, v, now, 0) for k, v in by_member.get(member, {}).items()])
        client.log_batch(child, params=[Param(k, _text(v)) for k, v in params.items()])
        client.set_tag(child, "harness.status", facts.get("status", "ok"))
        if config.output.mlflow.log_models and (run.path / "models" / member).is_dir():
            client.log_artifacts(child, str(run.path / "models" / member), "model")
        client.set_terminated(child, "FAILED" if failed(facts.get("status", "ok")) else "FINISHED")
    for name in ARTIFACTS:
        path = run.path / name
        if path.is_dir():
            client.log_artifacts(parent, str(path), name)
        elif path.exists():
            client.log_artifact(parent, str(path))
    client.set_tag(parent, "harness.status", getattr(info.status, "value", info.status))  # the run's: `completed`
    client.set_terminated(parent, "FINISHED")
    return record


def summary_figures(run, config: ExperimentConfig, live: set[str]) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """(per member, per model): the finite numbers of each row of the member table
    (summary_members.csv with repeats, else summary.csv) and of summary.csv, under their column
    names; settings (params already) and, for a member, the series logged at each step (`val_iou`:
    its last point is the column) left out."""
    settings = {*SETTINGS, *grid_columns(config.member_specs())}
    members = _figures(load_summary(run.member_rows_csv(config.train.repeats)), settings | live)
    return members, _figures(load_summary(run.summary_csv), settings)


def _figures(table, leave_out: set[str]) -> dict[str, dict[str, float]]:
    return {str(row["model"]): {k: float(v) for k, v in row.items() if k not in leave_out and k != "model" and is_finite(v)}
            for row in table.to_dict("records")}


def _log_metrics(client, run_id: str, metrics: list) -> None:
    for start in range(0, len(metrics), BATCH):
        client.log_batch(run_id, metrics=metrics[start : start + BATCH])


def member_params(spec, seed: int) -> dict[str, Any]:
    """A member's settings, named by their section (`optimizer.learning_rate`), unset ones left out;
    with the model it trains, its repeat and that repeat's training seed, so MLflow's UI can group
    a model's seeds (`model`) and name the seed each run was (`unet@2`: model unet, repeat 2)."""
    data = spec.model_dump(mode="json")
    data.pop("name", None)
    return {**repeat_facts(spec.name, seed), **flat_settings(data)}


def experiment_params(config: ExperimentConfig, info: RunRecord) -> dict[str, Any]:
    data = config.to_dict()
    params = {"name": config.name, "seed": config.seed, "total_steps": config.total_steps}
    params.update(flat_settings({"data": data["data"], "train": {k: v for k, v in data["train"].items() if k != "optimizer"}}))
    params["placement.strategy"] = (info.placement or {}).get("strategy")
    return {k: v for k, v in params.items() if v is not None}


def _text(value: Any) -> str:
    text = ",".join(map(str, value)) if isinstance(value, list) else str(value)
    return text[:6000]  # MLflow's limit on a param's value


def _brief(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
