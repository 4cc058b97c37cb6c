"""The end of a run: a list of small actions, applied in order to the trained run.

The order matters: probes before the tables (summary.csv shows their figures), exports before the
tables (nothing reads them, but a kill after the tables must not leave a completed run without its
models), `completed` before the report page (it shows run.json's final facts), MLflow last (a
failure there costs only the MLflow copy).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Callable

from harness.config import metrics
from harness.config.consistency import comparison_warnings
from harness.config.metrics import higher_is_better
from harness.config.schema import ExperimentConfig
from harness.data.duplicates import duplicates_warning
from harness.data.pipeline import Datasets, build_datasets
from harness.errors import ConfigError
from harness.outputs.stuck import collapsed_late_warnings, stuck_output_warnings
from harness.outputs.tables import load_losses
from harness.rundir import MemberRecord, RunDir, RunStatus, utc_now
from harness.training.export import export_model, export_saved_model
from harness.training.flops import forward_flops
from harness.training.held_out import score_test_split
from harness.training.output_spread import first_images, member_output_spread
from harness.training.probe import held_in_memory, probe_input_wait_share, probe_ms_per_step, probe_switched_ms_per_step
from harness.training.race import correlations, final_scores
from harness.training.records import StepTiming
from harness.training.run_book import RunBook
from harness.training.serve import exported_mb, measure_serving_all


@dataclass
class FinishedRun:
    """What the end-of-run actions work on: the trained members and everything the run knows."""

    config: ExperimentConfig
    run: RunDir
    placement: Any
    members: list
    datasets: Datasets
    scan: Any
    compiled: Any  # CompiledMembers: the fused step, the eval function, the members' switches
    global_step: Any
    records: dict[str, MemberRecord]
    timing: StepTiming
    book: RunBook  # run.json: `book.update(...)` changes fields and writes it; `book.record` reads it
    warnings: list[str] = field(default_factory=list)
    samples: tuple | None = None  # samples.png's images, masks and predictions, made with the weights the test split scored
    _probe_data: Any = None
    _probe_batches: Any = None

    @property
    def train_loop(self):
        return self.compiled.train_loop

    @property
    def switches(self) -> dict | None:
        """member -> its on/off variable in the step (one replica), else None."""
        return self.compiled.switches

    def probe_data(self):
        """The training batches the probes time on: the run's own pipeline again, repeated (it
        may hold only the few steps this process trained). A process that trained none (the end
        of a run resumed after its last step) builds the run's first batches (0.4 s of pipeline
        building on smoke, saved otherwise)."""
        if self._probe_data is None:
            if self.timing.first_call_s is not None:
                self._probe_data = self.datasets.train.repeat()
            else:
                steps = self.config.output.probe_steps
                self._probe_data = build_datasets(self.config.data, self.config.training_seeds(), 0, 3 * steps + 1, self.scan).train
        return self._probe_data

    def probe_batches(self):
        """The first `probe_steps` of them held in memory (input that costs nothing), read once for
        both probes."""
        if self._probe_batches is None:
            self._probe_batches = held_in_memory(self.probe_data(), self.config.output.probe_steps)
        return self._probe_batches


def record_trace_count(done: FinishedRun) -> None:
    done.book.update(trace_count=done.compiled.trace_count, eval_trace_count=done.compiled.eval_trace_count)


def record_race(done: FinishedRun) -> None:
    """Can the race be trusted? Each rung's ranking against the final one, over the models that
    finished (run.json `race.correlations`; the report and the nightly history show it)."""
    race = done.book.record.race
    if not race:
        return
    finished = [name for name, record in done.records.items() if record.status.finished]
    final = final_scores(load_losses(done.run.losses_csv), race["metric"], finished)
    done.book.update(race={**race, "correlations": correlations(race["rungs"], final, higher_is_better(race["metric"]))})


def probe_input_share(done: FinishedRun) -> None:
    steps = done.config.output.probe_steps
    if steps <= 0:
        return
    done.timing.input_wait_share = probe_input_wait_share(done.train_loop, done.placement, done.members, done.global_step, done.probe_data(), done.probe_batches(), steps, done.config.output.probe_seconds)
    done.book.update(timing=done.timing.as_dict())


def probe_step_times(done: FinishedRun) -> None:
    """Each model's ms per step alone: in the run's own compiled loop by the members' switches (no
    new trace), or, over several replicas and for a member the loop no longer holds, its step
    traced alone."""
    steps, switches = done.config.output.probe_steps, done.switches or {}
    held = [m for m in done.members if m.name in switches]
    ms, batch = {}, done.config.data.batch_size
    if held and steps > 0:
        batches = done.placement.input_iterator(done.probe_batches())
        ms = probe_switched_ms_per_step(done.train_loop, switches, held, done.global_step, batches, steps, done.config.output.probe_seconds)
    if alone := [m for m in done.members if m.name not in switches]:
        images, masks = next(iter(done.datasets.val))
        ms.update(probe_ms_per_step(alone, done.placement.strategy, images, masks, steps, done.config.output.probe_seconds))
    for name, value in ms.items():
        done.records[name].ms_per_step = round(value, 3)
        done.records[name].images_per_s = round(1000.0 * batch / value, 1)


def network_of(member) -> tuple:
    """What a model's costs depend on: its network and where it runs, not its weights or how it
    was trained (repeats, and a grid's learning rates, share a network)."""
    spec = member.spec
    return (spec.kind, spec.arch, spec.backbone, repr(sorted(spec.options.items())), member.device)


def count_flops(done: FinishedRun) -> None:
    counted: dict[tuple, int | None] = {}
    for member in done.members:
        if (network := network_of(member)) not in counted:
            counted[network] = forward_flops(member.model, done.config.data.input_shape)
        done.records[member.name].flops_per_example = counted[network]
    done.book.write()


def measure_output_spread(done: FinishedRun) -> None:
    """Whether each member's output depends on its input, with the weights the ranking scores
    (output_spread.py): a stuck network is named by a warning at the tables. With a test split
    those are the weights chosen on validation, measured by `score_test` while it holds them;
    else the weights training ended on, here."""
    if done.datasets.test is None:
        images, masks = first_images(done.datasets.val)
        record_output_spreads(done, {m.name: member_output_spread(m, images, masks) for m in done.members})
        done.book.write()


def record_output_spreads(done: FinishedRun, spreads: dict[str, float | None], last_spreads: dict[str, float | None] | None = None) -> None:
    """Members that failed are left out (a diverged one's outputs are not numbers). `last_spreads`:
    of the last weights of members scored on others."""
    for name, spread in spreads.items():
        record = done.records[name]
        record.output_spread = None if record.status.failed else spread
        record.last_output_spread = None if record.status.failed else (last_spreads or {}).get(name)


def export_models(done: FinishedRun) -> None:
    if not done.config.output.export:
        return
    formats = done.config.output.export_formats
    for member in done.members:
        for key, model in member.exported_models().items():
            folder = done.run.path / "models" / member.name
            if "keras" in formats and (note := export_model(model, folder / f"{key}.keras")):
                done.warnings.append(f"models/{member.name}/{key}.keras: {note}")
            if "saved_model" in formats:
                export_saved_model(model, folder / f"{key}_saved_model")


def probe_serving(done: FinishedRun) -> None:
    """Each model's serving cost, measured once per network (`network_of`: 4 measurements, not 40,
    for a grid of 4 architectures x 10 learning rates; the same network's figures would differ
    only by the noise of timing), batch 1's calls interleaved across the networks (serve.py), in
    inference mode: the weights are only read."""
    if not done.config.output.serve_probe:
        return
    networks = {}
    for member in done.members:
        networks.setdefault(network_of(member), (member.model, member.device))
    measured = measure_serving_all(networks, done.config.data.input_shape, done.config.output.serve_batch)
    for member in done.members:
        record = done.records[member.name]
        for key, value in measured[network_of(member)].items():
            setattr(record, key, value)
        record.model_mb = exported_mb(done.run.path / "models" / member.name)
    done.book.write()


def score_test(done: FinishedRun) -> None:
    """The held-out test split, scored once with each member's weights chosen on validation."""
    if done.datasets.test is None:
        return
    from harness.outputs.derived import samples_from_models

    steps_per_epoch = done.datasets.steps_per_epoch
    # samples.png pictures the weights the ranking scores: those chosen on validation, predicted
    # here while they are loaded (the first repeat of each model, as samples.png shows).
    samples = samples_from_models(done.config, {m.name: m for m in done.members}, done.scan, done.datasets.val)  # images, masks, {model: member}
    pictured = (samples[0], list(samples[2].values())) if samples else None
    # The run's eval function, already traced, with every member switched on for the call (over
    # several replicas, only when no rebuild dropped any): a new one would cost a trace (about 7 s
    # on the quickstart's four networks).
    final_step = int(done.global_step.numpy())
    frozen_at = {m.name: done.records[m.name].frozen_at for m in done.members}  # None: trained to the end
    last_steps = {name: final_step if step is None else step for name, step in frozen_at.items()}
    scored = score_test_split(done.members, done.datasets.test, done.config, done.run.path, last_steps,
                              lambda step: (step - 1) // steps_per_epoch + 1, evaluate=done.compiled.eval_fn_over(done.members),
                              pictured=pictured, spread_images=first_images(done.datasets.val))
    record_output_spreads(done, scored.spreads, scored.last_spreads)
    done.book.update(test=scored.record)
    if samples:
        images, masks, firsts = samples
        done.samples = (images, masks, {model: _already(scored.predicted[member.name]) for model, member in firsts.items()})


def _already(prediction):
    """A predictor of samples already predicted (the images are those it was made of)."""
    return lambda images: prediction


def write_tables(done: FinishedRun) -> None:
    from harness.outputs.derived import samples_from_models, write_outputs

    samples = done.samples or samples_from_models(done.config, {m.name: m.predict for m in done.members}, done.scan, done.datasets.val)
    summary = write_outputs(done.run, done.config, done.book.record, samples)
    done.warnings += end_of_run_warnings(done.config, done.book.record, summary)
    for warning in done.warnings:
        print(f"harness: warning: {warning}", file=sys.stderr)


def mark_completed(done: FinishedRun) -> None:
    done.book.update(status=RunStatus.COMPLETED, ended=utc_now(), warnings=done.warnings)


def write_final_report(done: FinishedRun) -> None:
    from harness.outputs.derived import write_report_page

    if done.placement.is_chief:
        write_report_page(done.run, done.config, done.book.record)  # run.json facts now final


def log_mlflow(done: FinishedRun) -> None:
    """After completion: a failure here costs the MLflow copy, never the run's own results."""
    if done.config.output.mlflow is None or not done.placement.is_chief:
        return
    if (done.book.record.get("mlflow") or {}).get("stopped") == "while training":
        print("harness: MLflow: nothing logged at the end either (it failed while training); the run's results are complete", file=sys.stderr)
        return
    from harness.outputs.mlflow_log import finish_runs, view_command

    try:
        record = finish_runs(done.run, done.config, done.book.record)
        print(f"harness: MLflow: logged; to view it: {view_command(done.config.output.mlflow.tracking_uri)}", file=sys.stderr)
    except ConfigError:
        raise
    except Exception as exc:  # MLflow raises its own and its backends' errors
        record = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}
        print(f"harness: warning: MLflow logging failed, the run's results are complete: {record['error']}", file=sys.stderr)
    done.book.update(mlflow=record)


END_OF_RUN = (record_trace_count, record_race, probe_input_share, probe_step_times, count_flops, measure_output_spread, export_models, probe_serving, score_test, write_tables, mark_completed, write_final_report, log_mlflow)
# A group of a larger run measures and exports its members; the run's driver merges the groups
# and writes the one comparison (tables, report, MLflow) for all of them.
GROUP_END_OF_RUN = (record_trace_count, probe_input_share, probe_step_times, count_flops, measure_output_spread, export_models, probe_serving, score_test, mark_completed)
# What the terminal says while an action runs, when it has something to do (quick ones say nothing).
PHASES: dict[Callable, Callable[[FinishedRun], str | None]] = {
    probe_input_share: lambda d: "probing the input pipeline's share of the step" if d.config.output.probe_steps else None,
    probe_step_times: lambda d: "probing each model's step time alone" if d.config.output.probe_steps else None,
    count_flops: lambda d: "counting FLOPs",
    export_models: lambda d: "exporting the models" if d.config.output.export else None,
    probe_serving: lambda d: f"measuring each model's serving cost (latency at batch 1, images/s at batch {d.config.output.serve_batch})" if d.config.output.serve_probe else None,
    score_test: lambda d: f"scoring the held-out test split ({d.config.data.test_size} images) with the weights chosen on validation" if d.datasets.test is not None else None,
    write_tables: lambda d: "writing tables, statistics, plots and the report",
    log_mlflow: lambda d: "logging to MLflow" if d.config.output.mlflow is not None else None,
}
# What an action adds to the run, for the message of a run stopped before it (`mark_completed` and
# the records add nothing a user reads by name).
WRITES: dict[Callable, tuple[str, ...]] = {
    probe_input_share: ("probes",), probe_step_times: ("probes",), count_flops: ("FLOPs",), export_models: ("exported models",),
    probe_serving: ("serving costs",), score_test: ("test scores",), write_tables: ("tables", "plots"),
    write_final_report: ("report.html",), log_mlflow: ("the MLflow copy",),
}


def not_yet_written(done: FinishedRun, actions) -> str:
    """`tables, plots and report.html`: what the actions left to run would have written, each
    once, those with nothing to do left out (no probes with `output.probe_steps: 0`, no test scores
    without a test split): a run stopped after its tables were written does not say they were not.
    "" when none is left."""
    names: list[str] = []
    for action in actions:
        if action in PHASES and PHASES[action](done) is None:
            continue
        names += [name for name in WRITES.get(action, ()) if name not in names]
    return " and ".join(filter(None, [", ".join(names[:-1]), names[-1]])) if names else ""


def end_of_run_warnings(config: ExperimentConfig, record, summary) -> list[str]:
    """Every warning a run's tables come with: the data's, the validation's, stuck networks' (and
    those stuck only at their end, after the weights they are ranked with)."""
    spreads = {name: member.output_spread for name, member in record.models.items()}
    late = {name: (member.output_spread, member.last_output_spread, record.scored_step(name)) for name, member in record.models.items()}
    return data_warnings(config, record) + validation_warnings(summary, config) + stuck_output_warnings(spreads) + collapsed_late_warnings(late)


def data_warnings(config: ExperimentConfig, record) -> list[str]:
    """What weakens the comparison on the data's side: images copied across splits (the scan), too
    few images or two seeds to rank on, a bootstrap of the training split with one training seed."""
    warnings = [copies] if (copies := duplicates_warning((record.data or {}).get("duplicates"), config.data)) else []
    warnings += comparison_warnings(config)
    if config.data.bootstrap_train and config.train.repeats == 1:
        warnings.append("data.bootstrap_train with train.repeats 1: the one training seed trained on a bootstrap resample of the "
                        "training split (about 63% of its examples, some twice), and with one seed the intervals still cover "
                        "validation-image noise only; bootstrap_train is meant with train.repeats 3 or more")
    return warnings


def validation_warnings(summary, config: ExperimentConfig) -> list[str]:
    """What a reader of the tables should know: members compared on a loss some did not train on,
    and validation far worse than training (usually BatchNorm moving averages, momentum 0.99, that
    have not caught up with the weights in a short run)."""
    warnings = []
    losses = config.mask_losses()
    if config.output.compare_loss is None and len(losses) > 1:
        warnings.append(
            f"members train on different losses ({', '.join(losses)}); pairs.csv and the loss plot compare them on "
            f"{config.compare_loss()}, computed for every member from its predictions; set output.compare_loss to choose"
        )
    if config.losses_differ() and config.ranking_column() in metrics.OWN_LOSS_RANKINGS:
        warnings.append(
            f"the ranking is by {config.ranking_column()}, each member's own loss, but they train on different losses "
            f"({', '.join(losses)}): --set output.rank_by=val_compare_loss ranks them on {config.compare_loss()} alone"
        )
    if config.train.batchnorm_momentum is not None or "val_loss" not in summary:
        return warnings
    suspicious = summary[summary["val_loss"] > 3 * summary["final_train_loss"]]["model"].tolist()
    if not suspicious:
        return warnings
    return warnings + [
        f"validation loss is over 3x the training loss for {', '.join(suspicious)}. In short runs "
        "this is usually BatchNorm moving averages lagging the weights; try "
        "--set train.batchnorm_momentum=0.9"
    ]
