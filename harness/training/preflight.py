"""The checks that need no TensorFlow, run before it is imported (about 10 s quiet, a minute on a
busy machine): a typo in a module path, a missing image folder, masks of the wrong size or with
the wrong values, a run locked by another process answer in seconds.

This module imports nothing that imports TensorFlow (tests/test_preflight.py checks it). The data
scan it makes is handed on to the run: it is not done twice. Only what needs code or TensorFlow
waits: a factory's own size rule (importing it runs the user's module), a TFDS source.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

from harness import rundir as rd
from harness.config import catalog
from harness.config.consistency import comparison_warnings, sized_problems
from harness.config.schema import ExperimentConfig
from harness.data.duplicates import duplicates_warning
from harness.data.resolve import resolve_data
from harness.data.scan import memory_warning
from harness.errors import ConfigError
from harness.rundir.start_folder import elsewhere_hint


def before_tensorflow(config: ExperimentConfig, results_dir: Path | None = None):
    """(config, scan) with the data resolved when that needs no user code; else (config, None)
    and the run resolves it after importing the code."""
    check_module_paths(config)
    check_extras(config)
    if config.data.source in ("synthetic", "tfds") or _names_code(config):
        return config, None
    multiple = math.lcm(*(catalog.input_multiple(arch, options) for _, arch, options in config.networks()))
    return resolve_data_sizes(config, results_dir, multiple)


def _names_code(config: ExperimentConfig) -> bool:
    return any(catalog.is_factory(arch) for _, arch, _ in config.networks())


def check_module_paths(config: ExperimentConfig) -> None:
    """Every `package.module` a factory or kind names can be found (without importing it)."""
    problems = []
    for i, spec in enumerate(config.models):
        for field, path in (("arch", spec.arch), ("kind", spec.kind)):
            if ":" not in path:
                continue
            module = path.partition(":")[0]
            try:
                found = importlib.util.find_spec(module)
            except (ImportError, ValueError) as exc:  # a parent package that is missing or broken
                found, why = None, f": {exc}"
            else:
                why = ""
            if found is None:
                problems.append(f"models.{i}({spec.name}).{field}: cannot find module {module!r} for {path!r}{why} ({_where_to_look(module, path)})")
    if problems:
        raise ConfigError("the code this config names cannot be found:", problems)


def check_extras(config: ExperimentConfig) -> None:
    """The optional packages the config asks for are installed (found, not imported): without
    them a run failed after TensorFlow's import, in a run directory of its own."""
    wanted = [("output.mlflow is set", "mlflow")] if config.output.mlflow is not None else []  # each package harness's extra of its name
    wanted += [("placement.engine: ray", "ray")] if config.placement.engine == "ray" else []
    missing = [f"{why} but {package} is not installed: pip install \"harness[{package}]\"" for why, package in wanted if not _installed(package)]
    if missing:
        raise ConfigError("the config asks for packages that are not installed:", missing)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a module set to None in sys.modules (blocked), or broken
        return False


def _where_to_look(module: str, path: str) -> str:
    """The likely slip behind a module that cannot be found: a file's name where a module's is
    due, or a module beside the user that the `harness` command (unlike `python -m`) does not
    import from the current folder."""
    if module.endswith(".py"):  # a path with '/' in it is refused by the config's own check
        return f"name the module, not its file: {module.removesuffix('.py')}:{path.partition(':')[2]}, with its folder on PYTHONPATH"
    here = Path(*module.split("."))
    found = next((f for f in (here.with_suffix(".py"), here / "__init__.py") if (Path.cwd() / f).is_file()), None)
    if found is not None:
        shown = f"{here}/" if found.name == "__init__.py" else found
        return (f"{shown} is in the current folder, which the harness command does not import from: "
                f"run PYTHONPATH=. harness ..., or python -m harness ...")
    return f"is its folder on PYTHONPATH? running from {Path.cwd()}"


def resolve_data_sizes(config: ExperimentConfig, results_dir: Path | None, multiple: int, say: bool = True):
    """Real sources: the pre-flight scan (exit 3 naming every bad file); returns the config with
    the sizes it found, and the scan. `say`: print what the scan found (a group's process does
    not: its driver did, once)."""
    cache = Path(results_dir or config.output.results_dir) / config.name / ".data-cache"
    resolved, scan = resolve_data(config, multiple, cache)
    if scan is not None and say and config.output.progress != "none":
        facts = scan.facts
        print(
            f"harness: data: {facts['used']} examples ({scan.train_size} train, {scan.val_size} val"
            f"{f', {scan.test_size} test' if scan.test_size else ''}) of "
            f"{facts['listed']} listed, {facts['skipped']} skipped, at {scan.image_size[0]}x{scan.image_size[1]} "
            f"({facts['image_size_reason']}); scan {facts['scan_seconds']} s",
            file=sys.stderr,
        )
        for note in facts["notes"]:
            print(f"harness: data: {note}", file=sys.stderr)
        if crowded := memory_warning(facts.get("memory")):
            print(f"harness: warning: {crowded}", file=sys.stderr)
    if scan is not None and say and (copies := duplicates_warning(scan.facts.get("duplicates"), resolved.data)):
        print(f"harness: warning: {copies}", file=sys.stderr)
    for weak in comparison_warnings(resolved) if say else []:  # said now, while stopping costs nothing; again at the end
        print(f"harness: warning: {weak}", file=sys.stderr)
    if problems := sized_problems(resolved):  # with the sizes the scan found: before any run directory
        raise ConfigError("the config does not fit the data found:", problems)
    return resolved, scan


def refuse_locked(run_dir: Path) -> None:
    """A run another live process holds: exit 5 now, not after TensorFlow's import (taking and
    leaving the lock raises the lock's own message, naming the holder)."""
    if rd.holder_of(Path(run_dir)) is not None:
        with rd.FolderLock(Path(run_dir)):
            pass


def refuse_data_elsewhere(run: rd.RunDir, config: ExperimentConfig) -> None:
    """A command on a run asked from another folder than the one it was started from, where its
    relative data paths are not found: said before TensorFlow's import, with where to run it."""
    if hint := elsewhere_hint(config, run.read_record().started_in):
        raise ConfigError(hint)
