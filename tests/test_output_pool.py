"""The output processes (harness/outputs/pool.py): the same files as this process would write,
a task's errors as its own, a worker lost mid-task, workers that ignore Ctrl-C and never outlive
their parent, a script without a main guard run once, and a run whose own process loads no
plotting or statistics library."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, tiny_config

from harness.config.loading import validate_config
from harness.errors import ConfigError
from harness.outputs import pool


@pytest.fixture
def workers(monkeypatch):
    """Two output workers of this test's own; afterwards none, and the process may start its pool again."""
    pool.stop()
    monkeypatch.setenv(pool.ENV, "2")
    pool.start()
    yield
    pool.stop()
    monkeypatch.setattr(pool, "_broken", False)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    import harness

    config = validate_config(tiny_config(output={"probe_steps": 0, "progress": "none", "sample_images": 2, "plot_formats": ["png"]}))
    return harness.run(config, results_dir=tmp_path_factory.mktemp("pool"))


def written_files(run_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in [*run_dir.glob("*.csv"), run_dir / "report.html", *(run_dir / "plots").glob("*")]}


def test_the_workers_write_the_same_files_to_the_byte_as_this_process(finished_run, tmp_path, monkeypatch, workers):
    from harness.outputs.derived import write_outputs, write_report_page
    from harness.rundir import RunDir

    written = {}
    for way in ("workers", "here"):
        if way == "here":
            pool.stop()
            monkeypatch.setenv(pool.ENV, "0")
        copy = tmp_path / way
        shutil.copytree(finished_run.run_dir, copy)
        shutil.rmtree(copy / "plots")
        (copy / "summary.csv").unlink()
        run = RunDir(copy)
        record, config = run.read_record(), run.read_config()
        assert pool.run("pool_tasks:where", 1)[1] == ("worker" if way == "workers" else "here")
        write_outputs(run, config, record)
        write_report_page(run, config, record)
        written[way] = written_files(copy)
    assert {"summary.csv", "pairs.csv", "loss_curves.png", "val_metrics.png", "quality_vs_cost.png", "report.html"} <= set(written["here"])
    assert written["workers"] == written["here"]


def test_a_task_that_fails_in_a_worker_raises_its_own_error(workers):
    assert pool.run("pool_tasks:where", 3) == (3, "worker")
    with pytest.raises(ConfigError, match="train.x: refused by the test's task"):
        pool.run("pool_tasks:refuse", "train.x")


def test_a_worker_writes_under_the_umask_and_in_the_folder_of_the_call_not_of_its_start(workers, tmp_path, monkeypatch):
    pool.settle()  # the workers started under the suite's umask and folder
    monkeypatch.chdir(tmp_path)
    previous = os.umask(0o002)
    try:
        folder = pool.run("pool_tasks:write_relative", "out.txt")
    finally:
        os.umask(previous)
    assert pool.run("pool_tasks:where", 1) == (1, "worker")
    assert Path(folder) == tmp_path
    assert (tmp_path / "out.txt").stat().st_mode & 0o777 == 0o664


def test_a_worker_killed_mid_task_leaves_the_task_and_the_rest_to_this_process(workers):
    assert pool.run("pool_tasks:die_in_a_worker", 7) == 7  # the worker died; the task ran here
    assert pool.run("pool_tasks:where", 1) == (1, "here")  # a broken pool is not used again
    pool.start()
    assert pool.run("pool_tasks:where", 1) == (1, "here")  # nor started again in this process


def test_with_no_output_processes_every_task_runs_here(monkeypatch):
    pool.stop()
    monkeypatch.setenv(pool.ENV, "0")
    pool.start()
    future = pool.submit("pool_tasks:where", 5)
    assert future.done() and pool.result(future) == (5, "here")


def test_a_worker_ignores_ctrl_c_and_leaves_when_its_parent_is_gone(tmp_path):
    script = f"""
import os, signal, sys, time
sys.path.insert(0, {str(REPO / 'tests')!r})
from harness.outputs import pool
pool.start()
pid = pool.run("os:getpid")
os.kill(pid, signal.SIGINT)  # what a terminal sends every process of the job on Ctrl-C
time.sleep(1.0)
print(pid, pool.run("os:getpid") == pid, flush=True)
os._exit(0)  # gone without stopping the pool: its workers must not linger
"""
    env = {**os.environ, pool.ENV: "1"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    pid, answered = done.stdout.split()
    assert answered == "True"  # Ctrl-C did not kill it
    deadline = time.time() + 10
    while _alive(int(pid)) and time.time() < deadline:
        time.sleep(0.2)
    assert not _alive(int(pid))
    assert "Traceback" not in done.stderr


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by init) counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_a_script_without_a_main_guard_runs_once_and_its_process_loads_no_plotting_library(tmp_path):
    # docs/api.md's shape: harness.run at a script's top level, no `if __name__ == "__main__":`.
    # spawn would import the script in each worker, which would then train (and write) again.
    config = tiny_config(output={"probe_steps": 0, "progress": "none", "sample_images": 2, "plot_formats": ["png"]})
    (tmp_path / "config.json").write_text(json.dumps(config))
    script = tmp_path / "compare_models.py"
    script.write_text(f"""
import json, sys
print("the script's top level", flush=True)
sys.path.insert(0, {str(REPO / 'tests')!r})
import harness
from harness.config.loading import validate_config
from pool_tasks import loaded
result = harness.run(validate_config(json.load(open({str(tmp_path / 'config.json')!r}))), results_dir={str(tmp_path / 'results')!r})
print(json.dumps({{"here": loaded(("matplotlib", "scipy.stats")), "plots": sorted(p.name for p in (result.run_dir / "plots").glob("*.png"))}}))
""")
    env = {k: v for k, v in os.environ.items() if k != pool.ENV}
    env[pool.ENV] = "2"
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("the script's top level") == 1, done.stdout
    assert len(list((tmp_path / "results" / "tiny").iterdir())) == 1  # one run directory
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts["here"] == []  # the workers loaded them, and drew
    assert {"loss_curves.png", "samples.png", "quality_vs_cost.png"} <= set(facts["plots"])


def test_a_number_of_output_processes_that_is_not_one_is_refused_by_name(monkeypatch):
    monkeypatch.setenv(pool.ENV, "two")
    with pytest.raises(ConfigError, match="HARNESS_OUTPUT_PROCESSES='two': the number of output processes"):
        pool.worker_count()
