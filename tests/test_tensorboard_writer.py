"""The TensorBoard writer (harness/outputs/writers.py): what it writes reads back as what
tf.summary.scalar writes, the format TensorBoard's scalar dashboard expects."""

from __future__ import annotations

from harness.core.backend import import_tf
from harness.outputs.writers import Row, TensorBoardWriter


def _read(folder) -> list[tuple]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"tensors": 0})
    events.Reload()
    tags = sorted(t for t in events.Tags()["tensors"] if not t.startswith("_hparams_"))  # ours carry hparams too
    return [(tag, e.step, e.tensor_proto.SerializeToString(), events.SummaryMetadata(tag).SerializeToString()) for tag in tags for e in events.Tensors(tag)]


def test_the_rows_read_back_as_tf_summary_scalar_writes_them(tmp_path):
    tf = import_tf()
    rows = [Row(step, 1, "unet", split, metric, value) for step, split, metric, value in
            ((1, "train", "loss", 0.75), (2, "train", "loss", 0.5000000123), (2, "val", "iou", 0.25), (3, "train", "loss", float("nan")))]
    writer = TensorBoardWriter(tmp_path / "ours", {"unet": {}})
    writer.write(rows, 3)
    writer.close()
    plain = tf.summary.create_file_writer(str(tmp_path / "plain" / "unet"))
    with plain.as_default():
        for r in rows:
            tf.summary.scalar(f"{r.split}/{r.metric}", r.value, step=r.step)
    plain.close()
    ours, expected = _read(tmp_path / "ours" / "unet"), _read(tmp_path / "plain" / "unet")
    assert len(expected) == 4 and ours == expected
