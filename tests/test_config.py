"""Config validation: every problem named with its key path, all at once, exit code 2."""

from __future__ import annotations

import copy

import pytest
from conftest import REPO, run_main, tiny_config, write_yaml

from harness.config import catalog
from harness.members import zoo
from harness.members.registry import check_code
from harness.config.loading import apply_override, load_config, validate_config
from harness.errors import ConfigError


def problems_of(raw) -> list[str]:
    with pytest.raises(ConfigError) as info:
        validate_config(raw)
    return info.value.problems


def test_valid_config_fills_defaults_into_each_model():
    config = validate_config(tiny_config())
    fcn = config.models[0]
    assert fcn.loss == "bce+dice" and fcn.optimizer.name == "adam" and fcn.jit_compile is False
    deconv = config.models[2]
    assert deconv.loss == "focal+dice" and deconv.optimizer.name == "sgd"
    assert config.total_steps == 2 * (16 // 4)


def test_unknown_top_level_key_gets_did_you_mean():
    raw = tiny_config()
    raw["modles"] = []
    (problem,) = problems_of(raw)
    assert problem.startswith("modles: unknown key") and "did you mean 'models'" in problem


def test_unknown_nested_key_names_its_path():
    raw = tiny_config(train={"epoch": 3})
    (problem,) = problems_of(raw)
    assert problem.startswith("train.epoch:") and "'epochs'" in problem


def test_wrong_type_and_out_of_range_are_reported_together():
    raw = tiny_config(train={"epochs": "many"}, data={"batch_size": 0})
    raw["models"][1]["optimizer"] = {"learning_rate": -1}
    problems = problems_of(raw)
    assert len(problems) == 3
    text = "\n".join(problems)
    assert "train.epochs:" in text and "'many'" in text
    assert "data.batch_size:" in text and "greater than or equal to 1" in text
    assert "models.1(unet).optimizer.learning_rate:" in text


def test_no_models():
    assert "models:" in problems_of(tiny_config(models=[]))[0]
    raw = tiny_config()
    del raw["models"]
    assert problems_of(raw) == ["models: required key is missing"]


def test_duplicate_model_names():
    raw = tiny_config()
    raw["models"][1]["name"] = "fcn"
    (problem,) = problems_of(raw)
    assert "unique" in problem and "fcn" in problem


def test_model_names_that_differ_only_in_case_are_refused_but_an_existing_run_stays_readable():
    """`Unet` and `unet` would share one folder (models/, tb/) on macOS and Windows; a run's own
    config.yaml made before the check is still read (resume, report)."""
    raw = tiny_config()
    raw["models"][1]["name"] = raw["models"][0]["name"].upper()
    (problem,) = problems_of(raw)
    assert "differ in more than case" in problem and f"{raw['models'][0]['name']} and {raw['models'][1]['name']}" in problem
    assert [m.name for m in validate_config(raw, accepted=True).models][:2] == [raw["models"][0]["name"], raw["models"][1]["name"]]


def test_a_bad_name_is_told_in_words_with_the_reserved_at_sign():
    raw = tiny_config()
    raw["models"][0]["name"] = "unet@2"
    (problem,) = problems_of(raw)
    assert "a name is letters, digits" in problem and "'@' is kept for the seeds of train.repeats" in problem and "pattern" not in problem
    raw = tiny_config()
    raw["models"][0]["kind"] = "kinds/mine.py:Kind"
    (problem,) = problems_of(raw)
    assert "a kind is supervised, gan, autoencoder, or a class of your own as package.module:Class" in problem and "pattern" not in problem


def test_unknown_arch_lists_choices_with_hint():
    raw = tiny_config()
    raw["models"][0]["arch"] = "Unet3"
    (problem,) = problems_of(raw)
    assert problem.startswith("models.0(fcn):")
    assert "unknown arch 'Unet3'" in problem and "did you mean 'Unet'" in problem and "PSPNet" in problem


def test_unknown_backbone():
    raw = tiny_config(models=[{"name": "u", "arch": "Unet", "backbone": "resnet19"}], data={"image_size": 32})
    (problem,) = problems_of(raw)
    assert "unknown backbone 'resnet19'" in problem and "resnet18" in problem


def test_image_size_names_model_and_nearest_size_for_all():
    raw = tiny_config(
        models=[{"name": "u", "arch": "Unet"}, {"name": "p", "arch": "PSPNet"}],
        data={"image_size": [100, 90]},
    )
    text = "\n".join(problems_of(raw))
    assert "model 'u' (Unet) needs each side to be a multiple of 32" in text
    assert "model 'p' (PSPNet) needs each side to be a multiple of 48" in text
    assert "nearest size that suits every model is 96x96" in text


@pytest.mark.parametrize(("size", "said"), [
    ([64], "(got [64]): item 2 is missing"),
    ([64, 64, 3], "(got [64, 64, 3]): 3 items, at most 2"),
    ("96x96", "(got '96x96'); write it as a list: [96, 96]"),
    ([0, 64], "(got [0, 64]): item 1: Input should be greater than or equal to 8"),
])
def test_an_image_size_of_another_shape_is_one_problem_saying_what_it_takes(size, said):
    # pydantic reports such a value once per branch of `[height, width] | auto`, each under its
    # internal name (`data.image_size.tuple[constrained-int, constrained-int].1`, `literal['auto']`)
    (problem,) = problems_of(tiny_config(data={"image_size": size}))
    assert problem == f"data.image_size: expected a list of 2 integers or auto {said}"


def test_a_backbone_with_a_least_size_is_refused_below_it_with_the_smallest_it_takes():
    # inceptionv3 refuses sides under 75 when it is built: that was a crash reported as a bug (exit 1)
    raw = tiny_config(models=[{"name": "inc", "arch": "Unet", "backbone": "inceptionv3"}, {"name": "r", "arch": "Unet"}], data={"image_size": 64})
    (problem,) = problems_of(raw)
    assert "model 'inc' (Unet with backbone inceptionv3) needs each side to be at least 75 pixels, got 64x64: 96x96" in problem
    raw["data"]["image_size"] = 96
    assert validate_config(raw).data.image_size == (96, 96)
    pspnet = tiny_config(models=[{"name": "inc", "arch": "PSPNet", "backbone": "inceptionv3"}], data={"image_size": 64})
    assert "the nearest size that suits every model is 96x96" in "\n".join(problems_of(pspnet))  # it said 48x48, then refused that


def test_a_number_where_a_folder_is_due_says_a_path_and_the_count_setting():
    raw = tiny_config(data={"val_images": 8, "masks": 3.5})
    problems = problems_of(raw)
    assert "data.val_images: a path to a folder or file is expected here (got 8); a number of synthetic images is data.val_size" in problems
    assert "data.masks: a path to a folder or file is expected here (got 3.5)" in problems


def test_pspnet_downsample_factor_changes_the_rule():
    assert catalog.input_multiple("PSPNet", {"downsample_factor": 4}) == 24
    raw = tiny_config(models=[{"name": "p", "arch": "PSPNet", "options": {"downsample_factor": 4}}], data={"image_size": 48})
    assert validate_config(raw).data.image_size == (48, 48)


def test_missing_weights_file(tmp_path):
    raw = tiny_config()
    raw["models"][0]["weights"] = str(tmp_path / "nope.h5")
    (problem,) = problems_of(raw)
    assert problem.startswith("models.0(fcn).weights:") and "does not exist" in problem


def test_bad_loss_term():
    (problem,) = problems_of(tiny_config(train={"loss": "bce+dise"}))
    assert problem.startswith("train.loss:") and "'dise'" in problem


def test_an_autoencoder_trains_on_mse_and_a_mask_loss_given_to_it_is_refused():
    autoencoder = {"name": "ae", "kind": "autoencoder", "arch": "small_autoencoder", "options": {"width": 4}}
    config = validate_config(tiny_config(models=[autoencoder, {"name": "fcn", "arch": "tiny_fcn"}], train={"loss": "focal"}))
    assert [m.loss for m in config.models] == ["mse", "focal"]  # config.yaml and summary.csv say what each trained on
    (problem,) = problems_of(tiny_config(models=[{**autoencoder, "loss": "bce+dice"}]))
    assert problem.startswith("models.0(ae):") and "loss 'bce+dice': an autoencoder trains on" in problem and "remove loss" in problem
    (problem,) = problems_of(tiny_config(models=[{"name": "fcn", "arch": "tiny_fcn", "loss": "mse"}]))
    assert problem.startswith("models.0(fcn):") and "'mse' is an autoencoder's reconstruction loss" in problem
    (problem,) = problems_of(tiny_config(models=[autoencoder], train={"loss": "mse"}))
    assert problem.startswith("train.loss:") and "an autoencoder trains on mse by itself" in problem
    # a run's older config.yaml filled train.loss into its autoencoders too: it is read as it was
    older = validate_config(tiny_config(models=[{**autoencoder, "loss": "bce+dice"}]), accepted=True)
    assert older.models[0].loss == "bce+dice"


def test_factory_that_cannot_be_imported():
    raw = tiny_config()
    raw["models"][0]["arch"] = "no_such_pkg.models:build"
    config = validate_config(raw)  # the config names code; reading it imports nothing
    with pytest.raises(ConfigError) as info:
        check_code(config)  # what `harness run` does before anything is written
    (problem,) = info.value.problems
    assert problem.startswith("models.0(fcn).arch:") and "cannot import module 'no_such_pkg.models'" in problem


def test_code_in_the_running_script_is_refused_with_where_to_put_it():
    # `__main__:small` builds in the script's own process, but resume, report and nightly read
    # config.yaml in processes of their own, where __main__ is something else
    raw = tiny_config()
    raw["models"][0]["arch"] = "__main__:small"
    raw["models"].append({"name": "own", "arch": "tiny_fcn", "kind": "__mp_main__:MyKind"})
    factory, kind = problems_of(raw)
    assert factory.startswith("models.0(fcn): factory '__main__:small' is in the script or notebook running harness")
    assert "name it 'mymodels:small'" in factory
    assert kind.startswith(f"models.{len(raw['models']) - 1}(own): kind '__mp_main__:MyKind' is in the script") and "'mymodels:MyKind'" in kind
    raw["models"][0]["arch"] = "main_models:small"  # a module merely named like it is a module
    assert problems_of(raw) == [kind]


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="is a folder"):  # not "does not exist": it does
        load_config(tmp_path)
    run = tmp_path / "results" / "tiny" / "20261130-220845"  # a run's folder, where its config was meant
    run.mkdir(parents=True)
    (run / "run.json").write_text("{}")
    write_yaml(run / "config.yaml", tiny_config())
    with pytest.raises(ConfigError, match=f"is a run's folder: `harness resume {run}` continues it .* its config.yaml"):
        load_config(run)


def test_yaml_syntax_error_names_the_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("name: x\nmodels:\n  - {name: a, arch: tiny_fcn\ntrain: {}\n")
    with pytest.raises(ConfigError, match=r"YAML syntax error at line \d+, column \d+"):
        load_config(path)


def test_a_config_indented_with_a_tab_or_saved_as_utf16_says_what_to_change(tmp_path):
    tabbed = tmp_path / "tabbed.yaml"
    tabbed.write_text("name: x\nmodels:\n\t- {name: a, arch: tiny_fcn}\n")
    with pytest.raises(ConfigError, match=r"line 3, column 1: .*\(YAML indents with spaces only: replace the tab with spaces\)"):
        load_config(tabbed)
    utf16 = tmp_path / "notepad.yaml"
    utf16.write_text("name: x\nmodels:\n  - {name: a, arch: tiny_fcn}\n", encoding="utf-16")
    with pytest.raises(ConfigError, match="is not UTF-8 text .*: save it as UTF-8"):
        load_config(utf16)
    bom = tmp_path / "bom.yaml"  # UTF-8 with a byte-order mark and CRLF line ends, as Windows editors save: read
    bom.write_bytes(b"\xef\xbb\xbfname: x\r\nmodels:\r\n  - {name: a, arch: tiny_fcn}\r\n")
    assert load_config(bom).name == "x"


def test_overrides_are_typed_against_the_schema(tmp_path):
    path = write_yaml(tmp_path / "c.yaml", tiny_config())
    config = load_config(path, ["train.epochs=5", "models.unet.optimizer.learning_rate=0.01", "data.image_size=[32, 32]"])
    assert config.train.epochs == 5
    assert config.models[1].optimizer.learning_rate == 0.01
    assert config.data.image_size == (32, 32)
    assert load_config(path, ["models.0.arch=tiny_unet"]).models[0].arch == "tiny_unet"


def test_a_model_whose_name_holds_dots_is_overridden_by_its_name():
    """A grid's names carry their values (unet-lr0.003): `--set models.unet-lr0.003.backbone=...`
    split the name at its dot and said there was no model 'unet-lr0'."""
    raw = {"name": "x", "models": [{"name": "unet-lr0.003", "arch": "tiny_unet"}, {"name": "unet-lr0.0030", "arch": "tiny_unet"},
                                   {"name": "unet-lr0", "arch": "tiny_fcn"}]}
    apply_override(raw, "models.unet-lr0.003.optimizer.learning_rate=0.003")
    apply_override(raw, "models.unet-lr0.0030.loss=dice")
    apply_override(raw, "models.unet-lr0.arch=tiny_deconv")
    assert raw["models"][0]["optimizer"] == {"learning_rate": 0.003} and raw["models"][1]["loss"] == "dice"
    assert raw["models"][2]["arch"] == "tiny_deconv" and "optimizer" not in raw["models"][2]
    with pytest.raises(ConfigError, match="no item named 'unet-lr1'; did you mean 'unet-lr0'"):
        apply_override(raw, "models.unet-lr1.003.loss=dice")


def test_override_with_wrong_type_names_the_key(tmp_path):
    path = write_yaml(tmp_path / "c.yaml", tiny_config())
    with pytest.raises(ConfigError) as info:
        load_config(path, ["train.epochs=abc"])
    assert any(p.startswith("train.epochs:") for p in info.value.problems)


def test_override_of_unknown_key_or_model(tmp_path):
    path = write_yaml(tmp_path / "c.yaml", tiny_config())
    with pytest.raises(ConfigError) as info:
        load_config(path, ["train.epohcs=3", "models.unte.arch=Unet", "nokey"])
    text = "\n".join(info.value.problems)
    assert "unknown key 'train.epohcs'; did you mean 'epochs'" in text
    assert "no item named 'unte'; did you mean 'unet'" in text
    assert "expected key.path=value" in text


def test_a_list_item_in_brackets_says_the_dotted_form(tmp_path):
    path = write_yaml(tmp_path / "c.yaml", tiny_config())
    with pytest.raises(ConfigError) as info:
        load_config(path, ["models[0].loss=dice", 'models["unet"].optimizer.learning_rate=0.01'])
    text = "\n".join(info.value.problems)
    assert "did you mean --set models.0.loss=dice ?" in text
    assert "did you mean --set models.unet.optimizer.learning_rate=0.01 ?" in text


def test_override_creates_missing_sections():
    raw = {"name": "x", "models": [{"name": "a", "arch": "tiny_fcn"}]}
    apply_override(raw, "train.optimizer.name=sgd")
    assert validate_config(raw).train.optimizer.name == "sgd"


def test_fingerprint_ignores_output_but_not_training():
    base = validate_config(tiny_config())
    moved = validate_config(tiny_config(output={"results_dir": "elsewhere"}))
    changed = validate_config(tiny_config(train={"epochs": 3}))
    assert base.fingerprint() == moved.fingerprint() != changed.fingerprint()


def _as_an_older_harness_recorded(config, *dropped: tuple[str, ...]) -> tuple[str, dict]:
    """run.json's `config` and `config_fingerprint` as a harness without the `dropped` settings
    wrote them: the dict without those keys, hashed as the fingerprint hashes (output and placement
    left out)."""
    import hashlib
    import json

    recorded = config.to_dict()
    for path in dropped:
        *parents, leaf = path
        node = recorded
        for key in parents:
            node = node[key]
        del node[leaf]
    payload = {k: v for k, v in recorded.items() if k not in ("output", "placement")}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16], recorded


def test_a_run_recorded_before_a_setting_existed_trains_as_the_config_with_it_at_its_default():
    """`resume` and tonight's run of `harness nightly` match a run by this rule: a setting harness
    added since the run was recorded, at its default, changes nothing; set to anything else (a test
    split, a race the older harness could not have run), or a recorded setting that differs, does."""
    config = validate_config(tiny_config())
    fingerprint, recorded = _as_an_older_harness_recorded(config, ("data", "exif_orientation"), ("data", "test_size"),
                                                          ("train", "race"), ("models", 0, "options"))
    assert fingerprint != config.fingerprint()  # what made harness nightly train tonight's night again
    assert config.trains_as_recorded(fingerprint, recorded)
    assert config.changed_since(recorded) == []
    longer = validate_config(tiny_config(train={"epochs": 3}))
    assert not longer.trains_as_recorded(fingerprint, recorded)
    assert longer.changed_since(recorded) == ["train.epochs: 2 -> 3"]
    raced = validate_config(tiny_config(train={"race": {"rungs": [1], "keep": 0.5}}, data={"test_size": 8}))
    assert not raced.trains_as_recorded(fingerprint, recorded), "a race added where the run had no such setting"
    assert [line.split(":")[0] for line in raced.changed_since(recorded)] == ["data.test_size", "train.race"]
    assert "data.test_size: (not a setting then) -> 8" in raced.changed_since(recorded)
    placed = validate_config(tiny_config(placement={"strategy": "one_device"}))
    assert placed.trains_as_recorded(fingerprint, recorded), "where it runs is not what it trains"
    assert config.trains_as_recorded(None, None), "a run that recorded no fingerprint"


def test_a_run_from_before_data_seed_drew_its_data_from_its_seed():
    """data.seed's default (0) is not what a run recorded before it existed did: its synthetic data
    came from the run's `seed`. resume reads such a run with its seed as data.seed; today's config
    at the default draws other data, so it is another experiment, and compare says so."""
    from harness.config.changes import fill_absent

    config = validate_config(tiny_config(seed=3))
    fingerprint, recorded = _as_an_older_harness_recorded(config, ("data", "seed"))
    assert config.data.seed == 0 and not config.trains_as_recorded(fingerprint, recorded)
    assert config.changed_since(recorded) == ["data.seed: (not a setting then) -> 0"]
    raw = copy.deepcopy(recorded)
    fill_absent(raw)
    resumed = validate_config(raw)
    assert resumed.data.seed == 3 and resumed.trains_as_recorded(fingerprint, recorded)


def test_a_settings_default_is_looked_up_by_its_path_through_sections_and_model_entries():
    from harness.config.changes import NO_DEFAULT, default_at
    from harness.config.schema import ExperimentConfig

    assert default_at(ExperimentConfig, ("data", "exif_orientation")) == "ignore"
    assert default_at(ExperimentConfig, ("data", "augment", "flip_left_right")) is False
    assert default_at(ExperimentConfig, ("train", "race")) is None
    assert default_at(ExperimentConfig, ("models", "options")) == {}
    assert default_at(ExperimentConfig, ("models", "optimizer", "name")) == "adam"
    assert default_at(ExperimentConfig, ("models", "arch")) is NO_DEFAULT, "required"
    assert default_at(ExperimentConfig, ("data", "no_such_key")) is NO_DEFAULT
    assert isinstance(default_at(ExperimentConfig, ("data", "image_size")), list), "as config.yaml writes it"


def test_static_backbone_list_matches_segmentation_models():
    sm = zoo.import_segmentation_models()
    assert sorted(catalog.SM_BACKBONES) == sorted(sm.Backbones.models_names())


def test_static_options_match_segmentation_models_signatures():
    import inspect

    sm = zoo.import_segmentation_models()
    set_by_harness = {"backbone_name", "input_shape", "classes", "activation", "weights", "kwargs"}
    for arch, options in catalog.SM_OPTIONS.items():
        assert sorted(options) == sorted(set(inspect.signature(getattr(sm, arch)).parameters) - set_by_harness), arch


def test_an_option_a_network_does_not_take_is_refused_with_the_config_naming_the_closest():
    # segmentation-models passes unknown names on to keras_applications, which refused them only
    # when the network was built: "('Invalid keyword argument: %s', 'decoder_filter')"
    (problem,) = problems_of(tiny_config(models=[{"name": "u", "arch": "Unet", "options": {"decoder_filter": [8, 8, 8, 8, 8]}}], data={"image_size": 32}))
    assert problem.startswith("models.0(u): Unet takes only the options ['decoder_block_type', 'decoder_filters', ")
    assert problem.endswith("not ['decoder_filter']; did you mean 'decoder_filters'?")
    (problem,) = problems_of(tiny_config(models=[{"name": "f", "arch": "tiny_fcn", "options": {"widht": 4}}]))
    assert problem == "models.0(f): built-in model 'tiny_fcn' takes only the options ['batchnorm', 'width'], not ['widht']; did you mean 'width'?"


def test_every_experiment_file_is_valid_and_explains_itself():
    for path in sorted((REPO / "experiments").glob("*.yaml")):
        text = path.read_text()
        assert text.startswith("#"), f"{path.name} must start with a comment saying what it compares"
        assert "harness run" in text or "harness nightly" in text, f"{path.name}: give the command"
        load_config(path)


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda raw: raw.update(extra=1), "extra: unknown key"),
        (lambda raw: raw["data"].update(image_size=[30, 30]), "multiple of 4"),
        (lambda raw: raw["models"][0].update(arch="Unet3"), "unknown arch"),
    ],
)
def test_cli_bad_config_exits_2_without_traceback(tmp_path, mutate, expected):
    raw = tiny_config()
    mutate(raw)
    result = run_main("run", write_yaml(tmp_path / "bad.yaml", raw), "--results", tmp_path / "r")
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "r").exists(), "a bad config must not create a run directory"


def test_cli_bad_override_exits_2(tmp_path):
    path = write_yaml(tmp_path / "c.yaml", tiny_config())
    result = run_main("run", path, "--set", "train.epochs=abc", "--results", tmp_path / "r")
    assert result.returncode == 2 and "train.epochs" in result.stderr and "Traceback" not in result.stderr


def test_keras3_already_imported_stops_with_advice():
    import subprocess
    import sys

    code = "import tensorflow as tf; tf.keras.layers.Dense; import harness"
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("TF_USE_LEGACY_KERAS", "SM_FRAMEWORK")}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode != 0
    assert "TensorFlow was imported with Keras 3" in result.stderr
    assert "Import harness before tensorflow" in result.stderr


def test_a_space_for_the_equals_sign_in_set_says_what_was_meant(tmp_path):
    path = write_yaml(tmp_path / "c.yaml", tiny_config())
    result = run_main("run", path, "--set", "train.epochs", "3", "--results", tmp_path / "r")
    assert result.returncode == 2 and "did you mean --set train.epochs=3" in result.stderr
    assert not (tmp_path / "r").exists()



def test_two_overrides_after_one_set_say_what_was_meant(tmp_path):
    path = write_yaml(tmp_path / "c.yaml", tiny_config())
    result = run_main("run", path, "--set", "train.repeats=3", "train.epochs=2", "--results", tmp_path / "r")
    assert result.returncode == 2 and "did you mean --set train.repeats=3 --set train.epochs=2 ?" in result.stderr
    assert not (tmp_path / "r").exists()
    from harness.cli import _set_hint

    assert _set_hint(["plan", "--set", "train.epochs=2", str(path), "--results", "r"]) is None  # a config after it is no override


def test_ranking_by_a_test_score_is_refused_with_the_validation_name_to_use():
    with pytest.raises(ConfigError) as error:
        validate_config(tiny_config(output={"rank_by": "test_f1"}))
    said = " ".join(error.value.render().split())
    assert "output.rank_by: name the validation score, val_f1" in said
    # This config holds out no test split: the message says how to hold one out, not "with a test split".
    assert "whenever the data hold out a test split (data.test_size, data.test_fraction or a test folder" in said
    for written, told in (("test_iuo", "name the validation score, val_iou: the ranking is on test_iou"),  # not val_iuo
                          ("test_xyz", "name a validation score (val_iou, val_f1, val_loss, val_compare_loss): the ranking is on its test score")):
        with pytest.raises(ConfigError) as error:
            validate_config(tiny_config(output={"rank_by": written}))
        assert told in " ".join(error.value.render().split())
    with_test = validate_config(tiny_config(data={"test_size": 8}, output={"rank_by": "val_f1"}))
    assert with_test.ranking_column() == "test_f1"


def test_the_api_takes_a_dict_and_one_override_as_a_string(tmp_path):
    """A notebook builds its config as a dict and passes one override as a plain string: both are
    taken (the string once, not character by character), and the caller's dict is left as it was."""
    raw = tiny_config()
    config = load_config(raw, "train.epochs=7")
    assert config.train.epochs == 7 and raw.get("train", {}).get("epochs") != 7
    assert load_config(write_yaml(tmp_path / "c.yaml", raw), "train.epochs=3").train.epochs == 3
    with pytest.raises(ConfigError, match="a YAML file's path, a dict of its keys or a loaded config, not list"):
        load_config([raw])


def test_a_loaded_config_takes_overrides_in_load_config_run_and_plan(monkeypatch):
    """A notebook loads a config once and tries a variant of it: load_config takes the loaded
    config (its grids already expanded) with overrides and leaves it as it was; `harness.plan`
    applied none of the overrides given with a loaded config, and `harness.run` refused them."""
    import harness
    from harness.outputs import pool
    from harness.scale import launch
    from harness.training import preflight

    grid = load_config(tiny_config(models=[{"name": "a", "arch": "tiny_fcn", "grid": {"optimizer.learning_rate": [0.1, 0.01]}}]))
    variant = load_config(grid, {"train.epochs": 7})
    assert variant.train.epochs == 7 and grid.train.epochs != 7
    assert [m.name for m in variant.models] == [m.name for m in grid.models] and len(grid.models) == 2
    assert load_config(grid).to_dict() == grid.to_dict() and load_config(grid).fingerprint() == grid.fingerprint()
    seen = []
    monkeypatch.setattr(launch, "plan_only", lambda config, results: seen.append(config) or (None,))
    monkeypatch.setattr(preflight, "before_tensorflow", lambda config, results: (seen.append(config), (config, None))[1])
    monkeypatch.setattr(pool, "start", lambda *args: None)
    monkeypatch.setattr(launch, "start_run", lambda config, *args, **kwargs: None)
    harness.plan(grid, "train.epochs=5")
    harness.run(grid, ["train.epochs=6"])
    assert [config.train.epochs for config in seen] == [5, 6]


def test_a_config_error_prints_its_problems_not_only_its_headline():
    """`str(error)`, what a notebook's traceback and `print(error)` show, holds every problem as
    the command line prints them."""
    with pytest.raises(ConfigError) as info:
        validate_config({"name": "x", "models": [{"name": "a", "arch": "tiny_fnc"}], "train": {"epohcs": 2}})
    text = str(info.value)
    assert text == info.value.render() and len(info.value.problems) == 2
    assert "tiny_fnc" in text and "epohcs" in text


def test_cce_on_a_binary_mask_is_refused_but_an_existing_run_stays_readable():
    """With one class cce counts only the foreground pixels: a model marking every pixel foreground
    scores 0 loss. It trained without a word before."""
    raw = tiny_config()
    raw["models"][0]["loss"] = "cce+dice"
    (problem,) = problems_of(raw)
    assert problem.startswith(f"models.{raw['models'][0]['name']}.loss: cce (categorical cross-entropy) needs data.classes 2 or more")
    assert validate_config(raw, accepted=True).models[0].loss == "cce+dice"
    raw["data"]["classes"] = 3
    assert validate_config(raw).models[0].loss == "cce+dice"


def test_a_section_in_another_shape_is_told_the_shape_to_write():
    """`models` as a mapping of names, a model as a bare name, an optimizer as its name: pydantic
    said "Input should be a valid list" and "a valid dictionary or instance of ModelSpec"."""
    assert problems_of({"name": "x", "models": {"unet": {"arch": "tiny_unet"}}}) == [
        "models: a list of entries, each with its name inside: `- {name: unet, arch: tiny_unet}`, not a mapping from names"]
    assert problems_of({"name": "x", "models": ["tiny_fcn"]}) == [
        "models.0: an entry is a mapping with at least a name and an arch, e.g. `{name: tiny_fcn, arch: tiny_fcn}` (got 'tiny_fcn')"]
    (problem,) = problems_of(tiny_config(train={"optimizer": "adam"}))
    assert problem == "train.optimizer: a mapping of keys (key: value) is expected here (got 'adam'; did you mean {name: adam}?)"
    assert not any("ModelSpec" in p or "instance of" in p for p in problems_of(tiny_config(placement={"ray": 3})))


def test_the_apis_resume_takes_one_override_as_a_string(tmp_path, monkeypatch):
    """As load_config does: a string is one override, not a list of its characters."""
    import harness
    from harness.outputs import pool
    from harness.rundir import RunDir, RunRecord
    from harness.scale import launch

    RunDir(tmp_path).write_record(RunRecord(name="tiny", run_id="r1"))
    write_yaml(tmp_path / "config.yaml", tiny_config())  # read before TensorFlow: the code it names must be found
    seen = {}
    monkeypatch.setattr(pool, "start", lambda *args: None)
    monkeypatch.setattr(launch, "resume", lambda run_dir, overrides, accept: seen.setdefault("overrides", overrides))
    harness.resume(tmp_path, "placement.strategy=one_device")
    assert seen["overrides"] == ["placement.strategy=one_device"]


def test_a_key_given_twice_is_refused_with_both_lines_and_an_empty_file_is_named(tmp_path):
    """PyYAML keeps the last of two equal keys without a word: a second `train:` pasted below the
    first dropped every setting of the first. YAML's merge key (`<<: *defaults` with overrides) stays."""
    path = tmp_path / "twice.yaml"
    path.write_text("name: x\ntrain:\n  epochs: 7\nmodels:\n  - {name: a, arch: tiny_fcn}\ntrain:\n  loss: dice\n")
    with pytest.raises(ConfigError, match=r"key 'train' is given twice in one mapping, at lines 2 and 6"):
        load_config(path)
    path.write_text("name: x\nbase: &base {arch: tiny_fcn, loss: bce}\nmodels:\n  - {<<: *base, name: a, loss: dice}\n")
    with pytest.raises(ConfigError, match="unknown key"):  # read fine; `base` itself is no setting
        load_config(path)
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    with pytest.raises(ConfigError, match="the file is empty"):
        load_config(empty)


@pytest.mark.parametrize(("section", "key", "said"), [
    ("train", "learning_rate", "train.learning_rate: unknown key; did you mean train.optimizer.learning_rate? (learning_rate is a key of train.optimizer)"),
    ("train", "lr", "train.lr: unknown key; did you mean train.optimizer.learning_rate?"),
    ("train", "warmup_steps", "train.warmup_steps: unknown key; did you mean train.optimizer.schedule.warmup_steps?"),
    ("data", "bs", "data.bs: unknown key; did you mean data.batch_size?"),
])
def test_a_key_written_in_the_section_above_its_own_is_pointed_to_where_it_belongs(section, key, said):
    raw = tiny_config()
    raw[section][key] = 1
    (problem,) = problems_of(raw)
    assert problem.startswith(said), problem


@pytest.mark.parametrize(("where", "key", "said"), [
    ("train", "batch_size", "train.batch_size: unknown key; did you mean data.batch_size? (batch_size is a key of data, not of train)"),
    ("data", "epochs", "data.epochs: unknown key; did you mean train.epochs? (epochs is a key of train, not of data)"),
    ("train", "seed", "train.seed: unknown key; did you mean seed? (seed is a key of the top level)"),
    ("model", "classes", "models.0(fcn).classes: unknown key; did you mean data.classes? (classes is a key of data, not of models.0(fcn))"),
    ("data", "validation_split", "data.validation_split: unknown key; did you mean data.val_fraction?"),
    ("data", "size", "data.size: unknown key; did you mean data.image_size?"),
    ("model", "encoder", "models.0(fcn).encoder: unknown key; did you mean models.0(fcn).backbone?"),
    ("placement", "num_gpus", "placement.num_gpus: unknown key; did you mean placement.devices?"),
])
def test_a_key_of_another_section_or_another_tools_name_is_pointed_to_harnesss_key(where, key, said):
    """Each of these listed every key of its section, or offered a near name of another meaning
    (`data.size` was offered `val_size`)."""
    raw = tiny_config()
    (raw["models"][0] if where == "model" else raw.setdefault(where, {}))[key] = 1
    (problem,) = problems_of(raw)
    assert problem == said, problem


def test_a_models_key_of_its_optimizer_is_pointed_there_by_the_models_name_in_the_yaml_and_in_set(tmp_path):
    raw = tiny_config()
    raw["models"][1]["learning_rate"] = 0.1
    (problem,) = problems_of(raw)
    assert problem.startswith("models.1(unet).learning_rate: unknown key; did you mean models.1(unet).optimizer.learning_rate?"), problem
    with pytest.raises(ConfigError) as info:
        load_config(write_yaml(tmp_path / "c.yaml", tiny_config()), ["models.unet.learning_rate=0.1"])
    assert "unknown key 'models.unet.learning_rate'; did you mean models.unet.optimizer.learning_rate?" in str(info.value.problems)


def test_overrides_may_be_a_mapping_of_key_paths_to_values_as_a_notebook_writes_them(tmp_path):
    path = write_yaml(tmp_path / "c.yaml", tiny_config())
    given = {"train.epochs": 5, "data.image_size": [32, 32], "models.unet.optimizer.name": "sgd", "output.mlflow": None}
    config = load_config(path, given)
    assert (config.train.epochs, config.data.image_size, config.models[1].optimizer.name) == (5, (32, 32), "sgd")
    assert config == load_config(path, ["train.epochs=5", "data.image_size=[32, 32]", "models.unet.optimizer.name=sgd", "output.mlflow=null"])
    with pytest.raises(ConfigError, match="train.epohcs"):
        load_config(path, {"train.epohcs": 5})


def test_every_problem_of_a_model_is_listed_at_once_with_case_slips_named():
    # A model's backbone was checked only once its other fields validated: a wrong backbone beside
    # a wrong loss was said only after the loss was mended. Letter case counts for nothing in hints.
    raw = tiny_config(models=[
        {"name": "a", "arch": "fpn"},
        {"name": "b", "arch": "Unet", "backbone": "ResNet18", "loss": "BCE", "optimizer": {"name": "Adam"}},
    ], data={"image_size": 32}, train={"loss": "Dice"})
    problems = problems_of(raw)
    assert [p.split(":")[0] for p in problems] == ["models.0(a)", "models.1(b).loss", "models.1(b).optimizer.name", "models.1(b)", "train.loss"]
    assert "unknown arch 'fpn'; did you mean 'FPN'?" in problems[0]
    assert "bad loss term 'BCE' in 'BCE' (did you mean 'bce'?)" in problems[1]
    assert problems[2].endswith("(got 'Adam'; did you mean 'adam'?)")
    assert "unknown backbone 'ResNet18' for Unet; did you mean 'resnet18'?" in problems[3]
    assert "(did you mean 'dice'?)" in problems[4]


def test_a_compare_by_key_that_is_no_setting_names_the_closest():
    (problem,) = problems_of(tiny_config(output={"compare_by": ["archh"]}))
    assert problem.startswith("output.compare_by: 'archh' is not a setting of a model entry; did you mean 'arch'? (choose from arch, backbone,")


def test_the_common_loss_is_the_one_most_members_train_on_else_the_outputs_cross_entropy():
    models = [{"name": "a", "arch": "tiny_fcn", "loss": "dice"}, {"name": "b", "arch": "tiny_unet", "loss": "focal+dice"}]
    assert validate_config(tiny_config(models=models)).compare_loss() == "bce"  # a tie: one sigmoid channel
    assert validate_config(tiny_config(models=models, data={"classes": 3})).compare_loss() == "cce"  # a softmax
    most = models + [{"name": "c", "arch": "tiny_deconv", "loss": "dice"}]
    assert validate_config(tiny_config(models=most, data={"classes": 3})).compare_loss() == "dice"


def undocumented_keys(text: str) -> list[str]:
    """Config keys the docs never name: a key counts as named as a YAML key (`logical_cpus:`) or
    in code quotes, alone or dotted (`data.test_size`, `warmup_steps`)."""
    import inspect
    import re

    from pydantic import BaseModel

    from harness.config.schema import ExperimentConfig

    internal = {"grid_values"}  # filled from `grid:` when the config is read, never written by users
    missing: list[str] = []

    def walk(model, prefix: str) -> None:
        for name, field in model.model_fields.items():
            key = prefix + name
            if name not in internal and not re.search(rf"\b{name}:|`(?:[\w.]*\.)?{name}`", text):
                missing.append(key)
            for kind in (*getattr(field.annotation, "__args__", ()), field.annotation):  # `X | None` too
                if inspect.isclass(kind) and issubclass(kind, BaseModel):
                    walk(kind, key + ".")

    walk(ExperimentConfig, "")
    return sorted(set(missing))


def test_every_config_key_is_named_in_the_docs():
    text = "\n".join(path.read_text(encoding="utf-8") for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))])
    assert undocumented_keys(text) == []


def test_every_yaml_block_in_the_docs_is_a_valid_config_fragment():
    """The pages' configs (the whole default config, a data section, a GAN, schedules, a race, a
    grid) are checked against the schema as a user pasting them into a two-model config would."""
    import yaml

    from conftest import page_blocks

    blocks = [(page.name, block) for page in sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])
              for block in page_blocks(page, "yaml")]
    assert len(blocks) >= 8, "the pages' yaml blocks are found"
    for page, block in blocks:
        pasted = {"name": "docs", "models": [{"name": "a", "arch": "tiny_fcn"}, {"name": "b", "arch": "tiny_fcn"}]}
        for key, value in yaml.safe_load(block).items():
            pasted[key] = {**pasted[key], **value} if isinstance(value, dict) and isinstance(pasted.get(key), dict) else value
        try:
            validate_config(pasted)
        except ConfigError as error:
            pytest.fail(f"{page}: a yaml block is not a valid config: {error}")
