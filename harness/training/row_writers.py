"""Where a run's rows go while it trains: losses.csv, the terminal, TensorBoard, MLflow."""

from __future__ import annotations

import shutil
from typing import Any

from harness.config.naming import repeat_facts
from harness.outputs.tables import load_losses
from harness.outputs.progress import TerminalWriter
from harness.outputs.writers import CsvRowsWriter, MultiWriter, Row, TensorBoardWriter
from harness.rundir import RunDir


def make_writers(config, run: RunDir, members: list, start: int, resuming: bool, is_chief: bool, record, save_mlflow) -> MultiWriter:
    names = [m.name for m in members]
    writers = [CsvRowsWriter(run.losses_csv), TerminalWriter(config.total_steps, names, config.output.progress, start)]
    if config.output.tensorboard:
        writers.append(tensorboard_writer(run, members, resuming, config.seed))
    if config.output.mlflow is not None and is_chief:
        from harness.outputs.mlflow_log import MlflowWriter  # MLflow is an optional extra

        writers.append(MlflowWriter(config, record, run.path, save_mlflow))
    return MultiWriter(writers)


def tensorboard_writer(run: RunDir, members: list, resuming: bool, seed: int) -> TensorBoardWriter:
    """TensorBoard files are derived data: on resume they are rebuilt from losses.csv (already
    cut back to the checkpoint), so redone steps never appear twice in TensorBoard either."""
    folder = run.path / "tb"
    if resuming:
        shutil.rmtree(folder, ignore_errors=True)
    writer = TensorBoardWriter(folder, {m.name: hparams(m.spec, seed) for m in members})
    if resuming:
        writer.write([Row(*r) for r in load_losses(run.losses_csv).itertuples(index=False)], step=0)
    return writer


def hparams(spec, seed: int) -> dict[str, Any]:
    """A member's settings in TensorBoard's hparams table, with which model and seed it is."""
    optimizer = spec.optimizer
    return {**repeat_facts(spec.name, seed), "arch": spec.arch, "backbone": spec.backbone or "", "loss": spec.loss,
            "optimizer": optimizer.name, "learning_rate": optimizer.learning_rate}
