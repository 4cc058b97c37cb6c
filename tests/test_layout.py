"""The package's shape: no import cycles (imports inside functions included), test modules that do
not import each other, and a config that can be read without running the code it names."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from conftest import REPO

PACKAGE = REPO / "harness"


def module_names() -> dict[str, Path]:
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(REPO).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def imported_modules(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Every harness module `module` imports, anywhere in its body. Importing `a.b.c` also runs the
    `__init__` of `a.b`, so a package counts as imported too (but a module's own ancestors don't:
    Python has already run them)."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            targets = [prefix] + [f"{prefix}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            parts = target.split(".")
            for i in range(1, len(parts) + 1):
                name = ".".join(parts[:i])
                if name in known and name != module and not module.startswith(name + "."):
                    found.add(name)
    return found


def import_graph(known: dict[str, Path]) -> dict[str, set[str]]:
    """Each module's harness imports, anywhere in its body."""
    return {name: imported_modules(name, path, known) for name, path in known.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    colour: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        colour[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if colour.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in colour and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        colour[node] = 2
        return None

    for node in sorted(graph):
        if node not in colour and (cycle := visit(node)):
            return cycle
    return None


def test_the_package_has_no_import_cycle():
    known = module_names()
    graph = import_graph(known)
    assert len(graph) > 40 and graph["harness.training.runner"], "the walk must see the package"
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_the_cycle_finder_finds_a_cycle_through_a_function_level_import(tmp_path):
    a = tmp_path / "a.py"
    a.write_text("def f():\n    from pkg import b\n")
    known = {"pkg.a": a, "pkg.b": tmp_path / "b.py"}
    (tmp_path / "b.py").write_text("from pkg.a import f\n")
    graph = import_graph(known)
    assert find_cycle(graph) in (["pkg.a", "pkg.b", "pkg.a"], ["pkg.b", "pkg.a", "pkg.b"])


# The floors of the house, lowest first: a layer may import its own modules and any lower floor,
# never a higher one nor a neighbour on its own floor (members and data know nothing of each other).
# rundir/ is the ground floor of everything that reads or writes a run; api sits under bench,
# whose calibration section runs experiments through it. leaving (how a process exits) imports nothing.
FLOORS = (
    ("errors", "leaving"), ("config",), ("core",), ("members", "data"), ("rundir",), ("outputs",), ("training",),
    ("scale",), ("nights",), ("api",), ("bench", "doctor"), ("cli",), ("__main__",),
)
# The package's own __init__ runs before any of its modules: it may only select the Keras backend
# (core.backend) and hand attribute lookups to the API, lazily.
ROOT_MAY_IMPORT = {"harness.core", "harness.core.backend", "harness.api"}


def layer_of(module: str) -> str:
    return module.split(".")[1] if module.count(".") else "harness"


def floor_violations(graph: dict[str, set[str]]) -> list[str]:
    floor = {layer: level for level, layers in enumerate(FLOORS) for layer in layers}
    found = []
    for module, imported in sorted(graph.items()):
        here = layer_of(module)
        for target in sorted(imported):
            there = layer_of(target)
            if here == "harness":
                if target not in ROOT_MAY_IMPORT:
                    found.append(f"{module} -> {target} (the package root imports only the backend)")
            elif there != here and there != "harness" and floor[there] >= floor[here]:
                found.append(f"{module} -> {target} ({there} is not below {here})")
    return found


def test_every_import_goes_down_the_floors_function_level_imports_included():
    known = module_names()
    placed = {layer for layers in FLOORS for layer in layers}
    assert {layer_of(m) for m in known} - {"harness"} <= placed, "a new subpackage needs a floor in FLOORS"
    graph = import_graph(known)
    assert floor_violations(graph) == []


def test_the_floor_check_finds_an_upward_import_inside_a_function(tmp_path):
    low = tmp_path / "low.py"
    low.write_text("def f():\n    from harness.training import runner\n")
    known = {"harness.outputs.low": low, "harness.training.runner": tmp_path / "runner.py"}
    (tmp_path / "runner.py").write_text("")
    graph = import_graph(known)
    assert floor_violations(graph) == ["harness.outputs.low -> harness.training.runner (training is not below outputs)"]


def test_test_modules_do_not_import_each_other():
    for path in (REPO / "tests").glob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith("test_"), f"{path.name} imports {node.module}"
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("test_") for a in node.names), path.name


def test_reading_a_config_runs_none_of_the_code_it_names():
    script = (
        "import sys, harness\n"
        "from harness.config.loading import validate_config\n"
        "c = validate_config({'name': 'x', 'models': [{'name': 'm', 'arch': 'this:s', 'kind': 'antigravity:K'}]})\n"
        "assert c.models[0].arch == 'this:s'\n"
        "print(sorted(m for m in ('this', 'antigravity', 'tensorflow') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", "validating a config imported code it names, or TensorFlow"


def test_a_process_that_only_trains_loads_no_plotting_or_statistics_library():
    # A group's worker and a run killed before its end never write tables or plots: matplotlib and
    # scipy.stats (about 0.7 s of imports per process) are loaded by the end-of-run action that does.
    script = (
        "import sys, harness, harness.training.entry, harness.training.runner, harness.scale.worker\n"
        "print(sorted(m for m in ('matplotlib', 'scipy.stats') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", "importing the training path loaded the output libraries"


def modules_missing_from_layout(layout_text: str) -> list[str]:
    """harness's modules (and experiment files) that docs/layout.md does not name where they live:
    a module of a subpackage must be named in that subpackage's lines of the tree."""
    named: dict[str | None, set[str]] = {}
    where: str | None = None
    for line in layout_text.split("```")[-2].splitlines():  # the tree: the page's last code block
        folder = re.match(r"^ {0,2}([\w.]+)/", line)
        if folder:
            where = folder.group(1)
        elif re.match(r"^ {2}\w", line):
            where = None  # a module of the package's top level
        named.setdefault(where, set()).update(re.findall(r"([\w]+\.(?:py|yaml))", line))
    missing = [str(p.relative_to(PACKAGE)) for p in sorted(PACKAGE.rglob("*.py"))
               if p.name != "__init__.py" and p.name not in named.get(p.parent.name if p.parent != PACKAGE else None, set())]
    missing += [f"experiments/{p.name}" for p in sorted((REPO / "experiments").glob("*.yaml")) if p.name not in named.get("experiments", set())]
    return missing


def test_the_layout_page_names_every_module_where_it_lives():
    assert modules_missing_from_layout((REPO / "docs" / "layout.md").read_text(encoding="utf-8")) == []


def test_harness_reads_every_csv_through_the_one_exact_reader():
    """rundir.read_csv reads floats back exactly under pandas 2 as well; a `pd.read_csv` elsewhere
    would read the last bit of a loss wrong there."""
    readers = [path.relative_to(REPO) for path in PACKAGE.rglob("*.py")
               if path != PACKAGE / "rundir" / "files.py" and re.search(r"\b(pd|pandas)\.read_csv\b", path.read_text())]
    assert readers == []
