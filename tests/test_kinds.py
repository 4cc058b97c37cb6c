"""Member kinds: a GAN pair, an autoencoder and a user's own class, in the same fused step as
plain models; checkpoints of nested models and both GAN optimizers survive a kill."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import KILL_CONFIG, page_blocks, TOTAL_STEPS, only_run_dir, run_cli, start_cli, tiny_config, wait_for_rows, wait_for_run_dir, write_yaml

from harness.api import run
from harness.core.backend import import_keras
from harness.config.loading import validate_config
from harness.members.registry import check_code
from harness.errors import ConfigError

keras = import_keras()

GAN = {
    "name": "gan", "kind": "gan", "arch": "pix2pix_generator", "options": {"width": 4, "depth": 2},
    "optimizer": {"name": "adam", "learning_rate": 0.0002, "beta_1": 0.5},
    "gan": {"discriminator_options": {"width": 4}, "l1_lambda": 10},
}
AUTOENCODER = {"name": "ae", "kind": "autoencoder", "arch": "small_autoencoder", "options": {"width": 4}}


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """A GAN, an autoencoder, a custom kind and a plain model in one step."""
    raw = tiny_config(
        models=[GAN, AUTOENCODER, {"name": "custom", "kind": "custom_kinds:FocalWithCoverage", "arch": "tiny_fcn"}, {"name": "fcn", "arch": "tiny_fcn"}],
        output={"probe_steps": 1, "sample_images": 2, "plot_formats": ["png"]},
    )
    return run(validate_config(raw), results_dir=tmp_path_factory.mktemp("r"))


def metrics_of(result, name, split):
    return set(result.losses.query("model == @name and split == @split")["metric"])


@pytest.mark.slow
def test_gan_reports_generator_discriminator_and_l1_losses(mixed):
    # compare_loss: the generator's masks scored on the common loss (its own is adversarial + L1)
    assert metrics_of(mixed, "gan", "train") == {"loss", "adv", "l1", "disc_loss", "compare_loss", "lr"}
    assert mixed.losses.query("model == 'gan' and metric == 'compare_loss'")["value"].notna().all()
    assert metrics_of(mixed, "gan", "val") == {"loss", "iou", "f1", "compare_loss"}  # members on different losses: the common one too
    train = mixed.losses.query("model == 'gan' and split == 'train'").pivot(index="step", columns="metric", values="value")
    np.testing.assert_allclose(train["loss"], train["adv"] + 10 * train["l1"], rtol=1e-5)
    models = mixed.run_dir / "models" / "gan"
    generator = keras.models.load_model(models / "model.keras", compile=False)
    discriminator = keras.models.load_model(models / "discriminator.keras", compile=False)
    assert generator.output_shape[-1] == 1 and discriminator.input_shape[-1] == 3 + 1
    # params: the served network's, as FLOPs, latency and model_mb are; run.json counts both trained
    summary = mixed.summary.set_index("model")
    assert summary.loc["gan", "params"] == generator.count_params()
    record = json.loads((mixed.run_dir / "run.json").read_text())["models"]["gan"]
    assert record["trained_params"] == generator.count_params() + discriminator.count_params() > record["params"]


@pytest.mark.slow
@pytest.mark.parametrize("train", [{"early_stopping": {"metric": "val_f1"}}, {"race": {"rungs": [1], "keep": 0.5, "metric": "val_iou"}}])
def test_a_watched_score_an_autoencoder_does_not_report_is_refused_before_anything_is_written(train, tmp_path):
    config = validate_config(tiny_config(models=[AUTOENCODER, {"name": "fcn", "arch": "tiny_fcn"}], train=train))
    with pytest.raises(ConfigError) as caught:
        run(config, results_dir=tmp_path)
    assert "models.0(ae): kind autoencoder reports loss on validation" in caught.value.render() and not any(tmp_path.iterdir())


def test_a_kinds_validation_without_the_watched_score_is_named_not_a_key_error():
    from harness.training.eval_actions import watched_score

    assert watched_score({"loss": 0.5, "iou": 0.25}, "iou", "mine", "train.race") == 0.25
    with pytest.raises(ConfigError, match="train.race watches iou, and mine's validation gave only loss, coverage"):
        watched_score({"loss": 0.5, "coverage": 0.1}, "iou", "mine", "train.race")


def test_autoencoder_is_scored_by_reconstruction(mixed):
    assert metrics_of(mixed, "ae", "train") == {"loss", "lr"} and metrics_of(mixed, "ae", "val") == {"loss"}
    model = mixed.models["ae"]
    assert model.output_shape[-1] == 3  # reconstructs the image, not a mask
    assert mixed.summary.set_index("model").loc["ae", "loss"] == "mse"  # what it trained on, not train.loss
    assert (mixed.run_dir / "plots" / "samples.png").exists()


def test_an_older_runs_autoencoder_with_a_mask_loss_in_its_config_still_trains_on_mse():
    from harness.members.kinds import AutoencoderMember

    older = validate_config(tiny_config(models=[{**AUTOENCODER, "loss": "bce+dice"}]), accepted=True)  # resume reads it so
    loss = AutoencoderMember.training_loss(older.models[0], older.data)
    images, reconstruction = np.full([2, 4, 4, 3], 0.5, np.float32), np.zeros([2, 4, 4, 3], np.float32)
    np.testing.assert_allclose(loss(images, reconstruction), [0.25, 0.25])


@pytest.mark.slow
def test_custom_member_kind_from_a_config(mixed):
    assert metrics_of(mixed, "custom", "train") == {"loss", "coverage", "compare_loss", "lr"}
    assert mixed.losses.query("model == 'custom' and metric == 'compare_loss'")["value"].notna().all()
    coverage = mixed.losses.query("model == 'custom' and metric == 'coverage'")["value"]
    assert coverage.between(0, 1).all()


@pytest.mark.slow
def test_a_kind_declares_which_of_its_own_metrics_go_up_and_the_run_records_it(mixed):
    from harness.config import metrics
    from harness.rundir import RunDir

    record = RunDir(mixed.run_dir).read_record()
    assert record.models["custom"].higher_is_better == ["coverage"] and record.models["gan"].higher_is_better == []
    assert metrics.higher_is_better("coverage") and metrics.higher_is_better("val_coverage")
    assert not metrics.higher_is_better("adv") and not metrics.higher_is_better("val_loss")


@pytest.mark.slow
def test_every_kind_trains(mixed):
    first, last = (mixed.losses.query("split == 'train' and metric == 'loss'").groupby("model")["value"].agg(agg) for agg in ("first", "last"))
    assert (last < first).sum() >= 3, "most members learn something in 8 steps"
    assert set(mixed.summary["status"]) == {"ok"}


def test_bad_kind_settings_are_config_errors():
    raw = tiny_config(models=[{"name": "a", "arch": "tiny_fcn", "gan": {"l1_lambda": 1}}, {"name": "b", "kind": "nope.mod:K", "arch": "tiny_fcn"}])
    with pytest.raises(ConfigError) as info:
        validate_config(raw)
    assert "'gan' settings apply to kind: gan" in "\n".join(info.value.problems)
    raw["models"][0].pop("gan")
    with pytest.raises(ConfigError) as info:
        check_code(validate_config(raw))  # the kind is imported only when a run resolves it
    assert "cannot import module 'nope.mod'" in "\n".join(info.value.problems)


@pytest.mark.slow
@pytest.mark.parametrize("placement", [{"strategy": "mirrored"}, {"strategy": "per_model"}])
def test_gan_under_mirrored_and_per_model(tmp_path, placement):
    raw = tiny_config(models=[{**GAN, "gan": {**GAN["gan"], "discriminator_device": "next"}}, {"name": "fcn", "arch": "tiny_fcn"}],
                      placement={**placement, "logical_cpus": 2})
    result = run(validate_config(raw), results_dir=tmp_path)
    assert result.info["status"] == "completed"
    assert np.isfinite(result.losses["value"]).all()
    if placement["strategy"] == "per_model":
        member_devices = result.info["placement"]["models"]
        assert member_devices["gan"] == ["/device:CPU:0"]
        generator = result.models["gan"]
        assert all(v.device.endswith("CPU:0") for v in generator.variables)


GAN_KILL_CONFIG = {**KILL_CONFIG, "models": [GAN, {"name": "fcn", "arch": "tiny_fcn"}]}


def test_gan_killed_and_resumed_equals_uninterrupted(tmp_path):
    clean = run_cli("run", write_yaml(tmp_path / "c.yaml", GAN_KILL_CONFIG), "--results", tmp_path / "clean")
    assert clean.returncode == 0, clean.stderr
    results = tmp_path / "killed"
    process = start_cli("run", tmp_path / "c.yaml", "--results", results)  # its kills often land in a .keras save: start_cli
    kills = 0
    for _ in range(2):  # two kills, then the last resume runs to the end (each cycle is a process: TF import and trace)
        run_dir = wait_for_run_dir(results, process)
        assert run_dir is not None, "the run ended before creating its run directory"
        rows = (run_dir / "losses.csv").read_text().count("\n") if (run_dir / "losses.csv").exists() else 0
        wait_for_rows(run_dir / "losses.csv", rows + 35, timeout=60, process=process)  # 5 rows a step; False: it finished
        if process.poll() is None:
            process.kill()
            kills += 1
        process.wait(timeout=60)
        if json.loads((only_run_dir(results) / "run.json").read_text())["status"] == "completed":
            break
        process = start_cli("resume", only_run_dir(results))
    process.wait(timeout=300)  # the last resume runs to the end
    assert kills >= 2
    run_dir, clean_dir = only_run_dir(results), only_run_dir(tmp_path / "clean")
    assert json.loads((run_dir / "run.json").read_text())["steps_done"] == TOTAL_STEPS
    assert (run_dir / "losses.csv").read_bytes() == (clean_dir / "losses.csv").read_bytes()
    for name in ("model.keras", "discriminator.keras"):
        a = keras.models.load_model(run_dir / "models" / "gan" / name, compile=False).get_weights()
        b = keras.models.load_model(clean_dir / "models" / "gan" / name, compile=False).get_weights()
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


def test_users_code_with_python_control_flow_on_tensors_is_converted_by_autograph(tmp_path):
    """harness traces its own side of the step without autograph; a custom kind's step and a
    subclassed layer's `call` still get it, as in any tf.function."""
    models = [{"name": "branchy", "kind": "custom_kinds:BranchesOnTensors", "arch": "tiny_fcn"},
              {"name": "guarded", "arch": "factories:guarded_convnet"}]
    result = run(validate_config(tiny_config(models=models, train={"epochs": 1})), results_dir=tmp_path)
    rows = result.losses.query("model == 'branchy' and metric == 'has_foreground'")["value"]
    assert len(rows) == 4 and set(rows) <= {0.0, 1.0} and rows.max() == 1.0  # synthetic shapes: foreground in most batches
    assert result.losses.query("model == 'guarded' and split == 'val' and metric == 'loss'")["value"].notna().all()


def test_docs_own_model_and_own_kind_train_as_written(tmp_path, monkeypatch):
    """docs/members.md's factory, its config line and its member kind, copied as a user would
    (into mypkg/models.py and mypkg/kinds.py) and trained: the page cannot drift from the API."""
    import yaml

    factory, kind = page_blocks("docs/members.md", "python")
    config_lines = page_blocks("docs/members.md", "yaml")[0]
    assert factory.startswith("# mypkg/models.py") and "class FocalWithCoverage(Member)" in kind
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "models.py").write_text(factory)
    (package / "kinds.py").write_text(kind)
    monkeypatch.syspath_prepend(str(tmp_path))
    (mine,) = yaml.safe_load(config_lines)["models"]
    focal = {"name": "focal", "kind": "mypkg.kinds:FocalWithCoverage", "arch": mine["arch"]}
    result = run(validate_config(tiny_config(models=[mine, focal])), results_dir=tmp_path / "r")
    assert result.info["status"] == "completed" and result.summary["status"].tolist() == ["ok", "ok"]
    assert metrics_of(result, "focal", "train") >= {"loss", "coverage"}
    assert result.models["mine"].layers[1].filters == 32, "the config line's options reach the factory"
