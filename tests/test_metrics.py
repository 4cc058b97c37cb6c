"""The metric vocabulary: one place for names, prefixes, direction, label and format."""

from __future__ import annotations

from harness.config import metrics
from harness.config.recipes import EarlyStoppingSpec, RaceSpec
from harness.config.schema import OutputSpec
from harness.outputs.columns import format_column


def test_columns_are_made_and_split_one_way():
    assert metrics.column("iou", "test") == "test_iou" and metrics.column("loss") == "val_loss"
    assert metrics.split_column("selected_val_iou") == ("selected_val", "iou")
    assert metrics.split_column("test_f1") == ("test", "f1") and metrics.split_column("params") == (None, "params")
    assert metrics.on_split("val_iou", "test") == "test_iou" and metrics.metric_of("selected_val_f1") == "f1"
    assert metrics.per_class("iou", 2) == "iou_c2" and metrics.is_per_class("f1_c12") and not metrics.is_per_class("f1")


def test_direction_comes_from_the_vocabulary_on_every_split():
    for column in ("val_iou", "test_iou", "selected_val_f1", "images_per_s", "serve_images_per_s"):
        assert metrics.higher_is_better(column), column
    for column in ("val_loss", "test_loss", "best_val_loss", "final_train_loss", "params", "latency_ms", "model_mb"):
        assert not metrics.higher_is_better(column), column
    assert not metrics.has_direction("val_mystery") and not metrics.higher_is_better("val_mystery")
    metrics.declare_higher_is_better(["mystery"])
    assert metrics.higher_is_better("val_mystery") and metrics.has_direction("test_mystery")


def test_a_class_score_reads_as_its_metric():
    """`test_iou_c2` was unknown to the vocabulary: no direction (compare's bold green would have
    marked the lowest) and no label."""
    assert metrics.higher_is_better("test_iou_c2") and metrics.higher_is_better("val_f1_c1")
    assert metrics.label("test_iou_c2") == "test IoU class 2" and metrics.bounds("selected_val_f1_c3") == (0.0, 1.0)
    assert format_column("val_iou_c1", 0.123456) == "0.1235"


def test_labels_and_formats():
    assert metrics.label("test_iou") == "test IoU" and metrics.label("ms_per_step") == "ms/step"
    assert metrics.label("selected_val_iou") == "selected val IoU"
    assert format_column("val_iou", 0.123456) == "0.1235" and format_column("params", 15000.0) == "15.0 k"
    assert format_column("latency_ms", 1.2345) == "1.23" and format_column("val_iou_low", 0.5) == "0.5000"


def test_the_config_choices_are_built_from_the_vocabulary():
    assert set(metrics.WATCHABLE) <= set(metrics.RANK_METRICS)
    assert OutputSpec.model_fields["rank_by"].annotation.__args__ == metrics.RANK_METRICS
    assert EarlyStoppingSpec.model_fields["metric"].annotation.__args__ == metrics.WATCHABLE
    assert RaceSpec.model_fields["metric"].annotation.__args__ == metrics.WATCHABLE
