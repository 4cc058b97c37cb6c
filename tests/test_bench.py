"""The benchmark in its tiny mode: it runs and writes its table. Not a timed test: no assertion
on speed, only that every figure was measured."""

from __future__ import annotations

import pandas as pd
from conftest import run_cli


def test_tiny_bench_writes_every_section(tmp_path):
    result = run_cli("bench", "--tiny", "--out", tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr
    (day,) = tmp_path.iterdir()
    table = pd.read_csv(day / "bench.csv")
    placement = table[table["section"] == "placement"]
    assert placement["contender"].tolist() == ["one_device", "mirrored", "per_model"]
    assert (placement["median_ms_per_step"] > 0).all() and (placement["trace_s"] > 0).all()
    assert placement.set_index("contender").loc["one_device", "median_ratio_to_one_device"] == 1.0
    checkpoint = table[table["section"] == "checkpoint"].iloc[0]
    assert checkpoint["save_ms"] > 0 and 0 < checkpoint["overhead_at_one_save_per_epoch"]
    assert "placement" in result.stdout
