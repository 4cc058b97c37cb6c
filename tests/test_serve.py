"""What a model costs to serve: measured after training, in inference mode, without touching the
trained weights or the run's results."""

from __future__ import annotations

import pytest

import numpy as np
import pandas as pd
from conftest import tiny_config

from harness.api import run
from harness.config.loading import validate_config


@pytest.mark.slow
def test_serving_cost_is_measured_per_model_and_leaves_every_weight_as_it_was(tmp_path):
    from harness.members.zoo import build_model
    from harness.training.serve import measure_serving

    model = build_model("tiny_unet", None, {}, (16, 16, 3), 1, None)  # BatchNorm: moving statistics too
    before = [w.copy() for w in model.get_weights()]
    figures = measure_serving(model, (16, 16, 3), serve_batch=4, calls=12)
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))
    assert 0 < figures["latency_ms"] <= figures["latency_p90_ms"] and figures["serve_images_per_s"] > 0
    assert figures["serve_peak_mb"] is None or figures["serve_peak_mb"] >= 0


def test_serving_memory_is_the_allocators_peak_of_the_served_batch_on_a_cpu_too():
    """The peak counts the tensors a call makes: a convolution's output at the serving batch at
    least, growing with its filters. The process's resident set, read before, counted what the
    process asked the system for: here 15.3 and 32.6 MB (not 4x), and near 0 after training,
    whose freed memory TensorFlow's CPU allocator reuses. On a CPU where TensorFlow leaves oneDNN
    off (an AMD EPYC with AVX2) its plain allocator kept no peak, the resident set was read, and
    this failed (36.6 MB for the 4 MB output) until harness selected the BFC allocator."""
    from harness.core.backend import import_keras
    from harness.training.serve import measure_serving

    keras = import_keras()
    peaks = {}
    for filters in (32, 128):
        model = keras.Sequential([keras.Input((64, 64, 3)), keras.layers.Conv2D(filters, 3, padding="same")])
        peaks[filters] = measure_serving(model, (64, 64, 3), serve_batch=8, calls=5)["serve_peak_mb"]
        output_mb = 8 * 64 * 64 * filters * 4 / 2**20  # float32 at the serving batch: 4 and 16 MB
        assert output_mb <= peaks[filters] < 4 * output_mb, (filters, peaks[filters])
    # Not 4x: the allocator may hand a tensor a free block of up to twice its size (a 4.6 MB one
    # read 8.0 MB in a fresh process), so after other tests the 4 MB output may read up to 8.
    assert peaks[128] > 2 * peaks[32]


def test_serving_memory_leaves_out_what_another_thread_allocates_during_one_call(monkeypatch):
    """The peak was the whole measurement's: in CI, after other tests in the same process, the 4 MB
    output above read 7.1 MB, and beside a tf.data pipeline refilling its prefetch buffer (as a
    run's training pipeline does after its last step) 17.0 MB. Each timed call at the serving
    batch is measured alone and the median taken: a tensor made during one of them, as another
    thread's would be, and held to the end, counts in that call only (it read 12.0 MB before)."""
    from harness.core.backend import import_keras, import_tf
    from harness.training import serve

    tf, keras = import_tf(), import_keras()
    held, batch_calls = [], []
    real = serve.serving_function

    def with_an_allocation_beside_one_call(model, input_shape):
        infer = real(model, input_shape)

        def call(images):
            batch_calls.append(images.shape[0] == 8)
            if sum(batch_calls) == serve.WARMUP_CALLS + 1:  # the first timed call at batch 8
                held.append(tf.ones((2**21,), tf.float32))  # 8 MB, alive until the measurement ends
            return infer(images)

        return call

    monkeypatch.setattr(serve, "serving_function", with_an_allocation_beside_one_call)
    model = keras.Sequential([keras.Input((64, 64, 3)), keras.layers.Conv2D(32, 3, padding="same")])
    figures = serve.measure_serving(model, (64, 64, 3), serve_batch=8, calls=5)
    assert len(held) == 1 and sum(batch_calls) >= serve.WARMUP_CALLS + 3
    assert 4.0 <= figures["serve_peak_mb"] < 8.0, figures  # 4.0 alone; up to 8 in a block twice its size


def test_no_garbage_collection_runs_during_a_serving_measurement(monkeypatch):
    """A collection during it freed tensors that were garbage before it began, lowering the
    allocator's current below the measurement's start and its peak with them: in CI the 16 MB
    output above read 15.9 MB after other tests in the same process; a 2 MB tensor held by a
    reference cycle made it read 14.0 (and a collection's pause inside a timed call is latency)."""
    import gc

    from harness.core.backend import import_keras
    from harness.training import serve

    window = {"open": False, "collections": 0}

    class Watched(serve.PeakMemory):  # the window: from reading the start to reading the peak
        def __init__(self, device):
            super().__init__(device)
            window["open"] = True

        def added_mb(self):
            window["open"] = False
            return super().added_mb()

    def seen(phase, info):
        window["collections"] += phase == "start" and window["open"]

    monkeypatch.setattr(serve, "PeakMemory", Watched)
    keras = import_keras()
    model = keras.Sequential([keras.Input((16, 16, 3)), keras.layers.Conv2D(4, 3, padding="same")])
    threshold = gc.get_threshold()
    gc.set_threshold(10)  # unpaused, every few allocations collect
    gc.callbacks.append(seen)
    try:
        serve.measure_serving(model, (16, 16, 3), serve_batch=2, calls=3, seconds=0.0)
    finally:
        gc.callbacks.remove(seen)
        gc.set_threshold(*threshold)
    assert window["collections"] == 0 and gc.isenabled()


def test_where_tensorflow_keeps_no_peak_for_the_device_the_resident_set_is_read(monkeypatch):
    from harness.training import serve

    def unsupported(device):
        raise ValueError(f"memory info is not supported for {device}")

    monkeypatch.setattr(serve.tf.config.experimental, "get_memory_info", unsupported)
    peak = serve.PeakMemory("/cpu:0")
    assert peak.device is None
    kept = b"\x01" * (64 * 2**20)  # written, so resident
    added = peak.added_mb()
    assert added is None or added >= 60  # None: a system without /proc/self/clear_refs
    del kept


@pytest.mark.slow
def test_a_run_reports_serving_columns_and_its_results_do_not_depend_on_the_probe(tmp_path):
    raw = tiny_config(train={"epochs": 1}, output={"serve_probe": True, "serve_batch": 4})
    probed = run(validate_config(raw), results_dir=tmp_path / "a")
    quiet = run(validate_config(tiny_config(train={"epochs": 1}, output={"serve_probe": False})), results_dir=tmp_path / "b")
    summary = probed.summary.set_index("model")
    assert (summary["latency_ms"] > 0).all() and (summary["serve_images_per_s"] > 0).all()
    assert (summary["model_mb"] > 0).all() and (summary["latency_p90_ms"] >= summary["latency_ms"]).all()
    assert quiet.summary["latency_ms"].isna().all()
    pd.testing.assert_frame_equal(probed.losses, quiet.losses, check_exact=True)
    for name in ("fcn", "unet", "deconv"):
        for a, b in zip(probed.models[name].get_weights(), quiet.models[name].get_weights()):
            np.testing.assert_array_equal(a, b)
    assert "latency ms" in (probed.run_dir / "report.html").read_text()


def test_serving_is_measured_once_per_network_not_per_learning_rate(tmp_path, monkeypatch):
    import harness.training.actions as actions

    measured = []

    def counting(models, *args, **kwargs):
        measured.extend(model.name for model, _ in models.values())
        return real(models, *args, **kwargs)

    real = actions.measure_serving_all
    monkeypatch.setattr(actions, "measure_serving_all", counting)
    models = [{"name": "fcn", "arch": "tiny_fcn", "grid": {"optimizer.learning_rate": [0.01, 0.001]}}, {"name": "unet", "arch": "tiny_unet"}]
    result = run(validate_config(tiny_config(models=models, train={"epochs": 1}, output={"serve_probe": True, "serve_batch": 4})), results_dir=tmp_path)
    assert sorted(measured) == ["tiny_fcn", "tiny_unet"]  # two networks, three members
    summary = result.summary.set_index("model")
    fcns = [m for m in summary.index if m.startswith("fcn")]
    assert len(fcns) == 2 and summary.loc[fcns[0], "latency_ms"] == summary.loc[fcns[1], "latency_ms"] > 0


class _FakeInference:
    """An inference function that takes `seconds` a call and counts its calls."""

    def __init__(self, seconds: float):
        self.seconds, self.calls = seconds, 0

    def __call__(self, images):
        import time

        self.calls += 1
        time.sleep(self.seconds)
        return self

    def numpy(self):
        return np.zeros(1)


def test_serving_timing_stops_early_for_slow_models_but_never_below_its_least_calls():
    from harness.training.serve import WARMUP_CALLS, _timed_calls

    fast, slow = _FakeInference(0.001), _FakeInference(0.03)
    assert len(_timed_calls(fast, None, most=50, least=10, seconds=2.0)[0]) == 50  # 50 ms of work: all 50
    assert len(_timed_calls(slow, None, most=50, least=10, seconds=0.2)[0]) == 10  # 0.3 s after the least 10
    stopped = len(_timed_calls(slow, None, most=50, least=3, seconds=0.2)[0])
    assert 3 <= stopped <= 7  # the first call past 0.2 s (sooner when a sleep overshoots)
    assert slow.calls == 2 * WARMUP_CALLS + 10 + stopped


class _Clocked:
    """An inference function whose calls take what the shared clock says now (slower and slower,
    as a machine another process starts to load), recording which model ran at each call."""

    def __init__(self, name: str, log: list, clock: dict, ms: float):
        self.name, self.log, self.clock, self.ms = name, log, clock, ms

    def __call__(self, images):
        self.log.append(self.name)
        self.clock["now"] += self.ms * self.clock["slowdown"]
        self.clock["slowdown"] *= 1.02
        return self

    def numpy(self):
        return np.zeros(1)


def test_batch_1_calls_are_interleaved_across_models_so_a_slowing_machine_slows_them_alike(monkeypatch):
    """Timed one model after another, a machine that slows during the probe made the last model
    timed look the dearest: of three equal networks the first read 1.09 and the last 1.62 here
    (1.49x). Interleaved in rounds, every model in each, the order turned each round, they read
    within 1.13x."""
    from harness.training import serve

    log, clock = [], {"now": 0.0, "slowdown": 1.0}
    monkeypatch.setattr(serve.time, "perf_counter", lambda: clock["now"])
    infers = {name: _Clocked(name, log, clock, 1.0) for name in ("a", "b", "c")}
    times = serve._interleaved_calls(infers, dict.fromkeys(infers), dict.fromkeys(infers), calls=10)
    assert all(len(t) == 10 for t in times.values())
    timed = log[3 * serve.WARMUP_CALLS:]  # after each model's warm-up
    rounds = [timed[i:i + 9] for i in range(0, len(timed), 9)]  # a settling call and 2 timed calls each
    assert [r[0::3] for r in rounds] == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"], ["b", "c", "a"]]
    medians = {name: np.median(t) for name, t in times.items()}
    assert max(medians.values()) / min(medians.values()) < 1.2  # 1.13: five rounds turn three models unevenly

    log.clear()
    clock.update(now=0.0, slowdown=1.0)
    one = serve._interleaved_calls({"a": infers["a"]}, {"a": None}, {"a": None}, calls=10)
    assert len(one["a"]) == 10 and log == ["a"] * (serve.WARMUP_CALLS + 10)  # alone: no settling call

    log.clear()
    clock.update(now=0.0, slowdown=1.0)
    sequential = {name: [] for name in infers}
    for name, infer in infers.items():  # the probe before: each model's calls back to back
        for _ in range(10):
            began = clock["now"]
            infer(None)
            sequential[name].append(clock["now"] - began)
    assert np.median(sequential["c"]) / np.median(sequential["a"]) > 1.4  # what interleaving prevents


def test_latency_at_batch_1_is_timed_over_every_one_of_its_calls_however_long_they_take():
    """The median and the 90th percentile of 50 calls: stopping after 10 once they took a second
    made a slow model's p90 the largest but one of 10 timings."""
    from harness.core.backend import import_keras, import_tf
    from harness.training.serve import WARMUP_CALLS, measure_serving

    tf, keras = import_tf(), import_keras()
    called = []

    class Counted(keras.layers.Layer):
        def call(self, images):  # a host call per run of the compiled function: counts the calls
            return tf.py_function(lambda x: called.append(1) or x, [images], images.dtype)

    inputs = keras.Input((8, 8, 1))
    model = keras.Model(inputs, Counted()(inputs))
    figures = measure_serving(model, (8, 8, 1), serve_batch=2, calls=50, seconds=0.0)  # every call "too long"
    assert len(called) == WARMUP_CALLS + 50 + WARMUP_CALLS + 3  # latency: all 50; throughput: its least 3
    assert 0 < figures["latency_ms"] <= figures["latency_p90_ms"]


def test_serving_is_one_trace_for_both_batch_sizes_as_the_exported_serve_endpoint_takes_any_batch(tmp_path, monkeypatch):
    """Two traces of fixed batch sizes cost a trace more per network and timed a graph no export
    serves: the SavedModel's endpoint leaves the batch dimension unknown."""
    from harness.core.backend import import_keras, import_tf
    from harness.training import serve
    from harness.training.export import export_saved_model

    tf, keras = import_tf(), import_keras()
    model = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Conv2D(2, 3, padding="same")])
    made, real = [], serve.serving_function
    monkeypatch.setattr(serve, "serving_function", lambda *args: made.append(real(*args)) or made[-1])
    figures = serve.measure_serving(model, (8, 8, 1), serve_batch=4, calls=5)
    assert figures["latency_ms"] > 0 and figures["serve_images_per_s"] > 0
    (infer,) = made
    assert infer.experimental_get_tracing_count() == 1
    export_saved_model(model, tmp_path / "saved")
    (endpoint_input,) = tf.saved_model.load(str(tmp_path / "saved")).signatures["serving_default"].structured_input_signature[1].values()
    assert infer.input_signature[0].shape.as_list() == endpoint_input.shape.as_list() == [None, 8, 8, 1]


def test_a_saved_model_alone_is_sized_and_named_when_asked_for_as_a_keras_model(tmp_path):
    """`output.export_formats: [saved_model]`: model_mb was left empty and load_run said the run
    exported nothing."""
    from harness.training.records import ExportedModels
    from harness.training.serve import exported_mb

    member = tmp_path / "models" / "unet"
    assert exported_mb(member) is None
    (member / "model_saved_model" / "variables").mkdir(parents=True)
    (member / "model_saved_model" / "saved_model.pb").write_bytes(b"x" * 2**19)
    (member / "model_saved_model" / "variables" / "variables.data-00000-of-00001").write_bytes(b"x" * 2**20)
    assert exported_mb(member) == 1.5
    with pytest.raises(KeyError, match=r"unet: exported only as a SavedModel \(output.export_formats\): load it with tf.saved_model.load\("):
        ExportedModels(tmp_path)["unet"]
    (member / "model.keras").write_bytes(b"x" * 2**21)
    assert exported_mb(member) == 2.0  # the .keras file, when there is one


def test_flops_count_a_multiply_add_as_two_as_docs_comparing_says():
    """docs/comparing.md's convention, by hand: a 3x3 convolution from 3 to 16 channels over 32x32
    pixels is 32*32*16*27 multiply-adds and 32*32*16 bias adds; a transposed one is counted by its
    input pixels; batch normalization and activations are not counted."""
    from harness.core.backend import import_keras
    from harness.training.flops import forward_flops

    keras = import_keras()
    layers = keras.layers

    def counted(*stack):
        return forward_flops(keras.Sequential([keras.Input((32, 32, 3)), *stack]), (32, 32, 3))

    assert counted(layers.Conv2D(16, 3, padding="same")) == 2 * 32 * 32 * 16 * 27 + 32 * 32 * 16
    assert counted(layers.Conv2DTranspose(16, 3, strides=2, padding="same")) == 2 * 32 * 32 * 16 * 27 + 64 * 64 * 16
    assert counted(layers.Conv2D(16, 3, padding="same", use_bias=False), layers.BatchNormalization(), layers.ReLU()) == 2 * 32 * 32 * 16 * 27
