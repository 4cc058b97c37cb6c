"""The TensorBoard writer (harness/outputs/writers.py): what it writes reads back as what
tf.summary.scalar writes, the format TensorBoard's scalar dashboard expects."""

from __future__ import annotations

import math

from harness.core.backend import import_tf
from harness.outputs.writers import Row, TensorBoardWriter


def _events(folder):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"tensors": 0})
    events.Reload()
    return events


def _read(folder) -> list[tuple]:
    events = _events(folder)
    tags = sorted(t for t in events.Tags()["tensors"] if not t.startswith("_hparams_"))  # ours carry hparams too
    return [(tag, e.step, e.tensor_proto.SerializeToString(), events.SummaryMetadata(tag).SerializeToString()) for tag in tags for e in events.Tensors(tag)]


def _hparams(folder) -> list:
    from tensorboard.plugins.hparams import plugin_data_pb2

    events = _events(folder)
    parsed = []
    for tag in sorted(t for t in events.Tags()["tensors"] if t.startswith("_hparams_")):
        data = plugin_data_pb2.HParamsPluginData()
        data.ParseFromString(events.SummaryMetadata(tag).plugin_data.content)
        parsed.append(data)
    return parsed


def test_the_rows_read_back_as_tf_summary_scalar_writes_them(tmp_path):
    tf = import_tf()
    rows = [Row(step, 1, "unet", split, metric, value) for step, split, metric, value in
            ((1, "train", "loss", 0.75), (2, "train", "loss", 0.5000000123), (2, "val", "iou", 0.25), (3, "train", "loss", float("nan")),
             (4, "train", "loss", 1e40), (5, "train", "loss", -1e40), (6, "train", "loss", float("inf")))]
    writer = TensorBoardWriter(tmp_path / "ours", {"unet": {}})
    writer.write(rows, 3)
    writer.close()
    plain = tf.summary.create_file_writer(str(tmp_path / "plain" / "unet"))
    with plain.as_default():
        for r in rows:  # beyond float32's range, the infinity TensorFlow's cast gives (a tf.constant refuses 1e40)
            tf.summary.scalar(f"{r.split}/{r.metric}", math.copysign(math.inf, r.value) if abs(r.value) > 3.5e38 else r.value, step=r.step)
    plain.close()
    ours, expected = _read(tmp_path / "ours" / "unet"), _read(tmp_path / "plain" / "unet")
    assert len(expected) == 7 and ours == expected


def test_the_hyperparameters_read_back_as_the_hparams_plugin_writes_them(tmp_path):
    from tensorboard.plugins.hparams import api as hp

    params = {"arch": "Unet", "backbone": "resnet18", "learning_rate": 0.001}
    TensorBoardWriter(tmp_path / "ours", {"unet": params}).close()
    plain = import_tf().summary.create_file_writer(str(tmp_path / "plain" / "unet"))
    with plain.as_default():
        hp.hparams(params, trial_id="unet", start_time_secs=0)
    plain.close()
    ours, expected = _hparams(tmp_path / "ours" / "unet"), _hparams(tmp_path / "plain" / "unet")
    assert len(expected) == 1 and len(ours) == 1
    assert ours[0].session_start_info.start_time_secs > 0  # when it was written
    ours[0].session_start_info.start_time_secs = 0
    assert ours[0] == expected[0] and ours[0].session_start_info.hparams["backbone"].string_value == "resnet18"
