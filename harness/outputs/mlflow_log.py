"""MLflow (optional: pip install "harness[mlflow]"): each model as its own MLflow run, under a
parent run for the experiment run, logged once, after the run completed (so resumes never log
twice). The MLflow run ids are recorded in run.json."""

from __future__ import annotations

import os
import time
from typing import Any

from harness.config.schema import ExperimentConfig
from harness.errors import ConfigError
from harness.training.rundir import RunDir
from harness.outputs.tables import load_losses

BATCH = 900  # MLflow accepts at most 1000 metrics per log_batch call


def log_run(run: RunDir, config: ExperimentConfig, info: dict[str, Any]) -> dict[str, Any]:
    try:
        from mlflow.entities import Metric, Param
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise ConfigError('output.mlflow is set but MLflow is not installed: pip install "harness[mlflow]"') from None
    spec = config.output.mlflow
    if spec.tracking_uri.startswith("file:"):
        # MLflow 3 keeps its file store (no server, no database) behind an explicit opt-in. A
        # database URI (sqlite:///mlflow.db) works too, with the full `mlflow` package installed.
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=spec.tracking_uri)
    name = spec.experiment or config.name
    experiment = client.get_experiment_by_name(name)
    experiment_id = experiment.experiment_id if experiment else client.create_experiment(name)

    tags = {"harness.run_dir": str(run.path), "harness.run_id": info["run_id"], "harness.fingerprint": info["config_fingerprint"]}
    parent = client.create_run(experiment_id, run_name=info["run_id"], tags=tags)
    parent_id = parent.info.run_id
    client.log_batch(parent_id, params=[Param(k, str(v)) for k, v in _experiment_params(config, info).items()])
    losses = load_losses(run.losses_csv)
    children = {}
    for member in config.member_specs():
        child = client.create_run(
            experiment_id, run_name=member.name,
            tags={**tags, "mlflow.parentRunId": parent_id, "harness.model": member.name},
        )
        child_id = child.info.run_id
        params = {"arch": member.arch, "backbone": member.backbone, "loss": member.loss, **member.optimizer.model_dump()}
        client.log_batch(child_id, params=[Param(k, str(v)) for k, v in params.items()])
        now = int(time.time() * 1000)
        rows = losses[losses["model"] == member.name]
        metrics = [Metric(f"{r.split}_{r.metric}", float(r.value), now, int(r.step)) for r in rows.itertuples()]
        facts = info["models"].get(member.name, {})
        metrics += [Metric(k, float(facts[k]), now, 0) for k in ("ms_per_step", "images_per_s", "params") if facts.get(k) is not None]
        for start in range(0, len(metrics), BATCH):
            client.log_batch(child_id, metrics=metrics[start : start + BATCH])
        client.set_terminated(child_id, "FINISHED" if facts.get("status", "ok") == "ok" else "FAILED")
        children[member.name] = child_id
    client.set_terminated(parent_id, "FINISHED")
    return {"tracking_uri": spec.tracking_uri, "experiment_id": experiment_id, "parent_run_id": parent_id, "runs": children}


def _experiment_params(config: ExperimentConfig, info: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": config.name,
        "seed": config.seed,
        "total_steps": config.total_steps,
        "batch_size": config.data.batch_size,
        "image_size": "x".join(map(str, config.data.image_size)),
        "repeats": config.train.repeats,
        "strategy": info.get("placement", {}).get("strategy"),
    }
