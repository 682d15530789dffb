"""The direction of imports, checked on the source of every module.

The one place the layering is enforced; docs/architecture.md draws the same picture and says
why each layer is where it is.
Highest first: a package may import the packages of the layers below it, and
none of its own layer or above. Imports inside functions count as much as those
at the top of a module: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

LAYERS: list[tuple[str, ...]] = [
    ("bench",),  # benchmarks: stand on the packages (the launcher's code included), not on tests
    ("batchscope",),  # the one command, one module per subcommand; nothing imports it
    ("stack",),  # the launcher: starts and wires everything; no package imports it
    # The deployment renderer: rules, prometheus.yml and the Grafana dashboard (built from the
    # dashboard's queries) into deploy/; only the `render` command imports it.
    ("deploygen",),
    ("dashboard",),
    # Acting on a live server (advise --apply, the autopilot loop, verify, the policy): it
    # stands on the doctor's and the advisor's reading of the model.
    ("autopilot",),
    # The doctor asks the advisor's search for its fix lines (doctor.prescribe); the advisor
    # needs nothing of the doctor.
    ("doctor",),
    ("advisor",),
    ("observe",),  # one way to watch a model: the sampler, the window, CPU, stored runs
    # Load runs; the collector; the rules and Prometheus/Alertmanager configs that both the
    # launcher and the renderer write. None of the three imports another.
    ("loadgen", "exporter", "rules"),
    # The run store: loadgen, the exporter, the advisor and the autopilot ask it; it takes
    # and returns plain values, so it needs none of them.
    ("runs",),
    ("tritonapi", "promapi"),  # the one Triton client, the one Prometheus client
    ("stacksettings",),  # ports, paths, /proc: imports none of the others
]
RANK = {package: level for level, packages in enumerate(LAYERS) for package in packages}


def imported_packages(path: Path) -> Iterator[tuple[int, str]]:
    """(line, top-level package) of every absolute import in a module."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module.split(".")[0]


def violations(root: Path) -> list[str]:
    """Every import that points up or sideways, as 'file:line: a imports b'."""
    found = []
    for package in RANK:
        for path in sorted((root / package).rglob("*.py")):
            for line, target in imported_packages(path):
                sideways_or_up = (
                    target in RANK and target != package and RANK[target] <= RANK[package]
                )
                if sideways_or_up or target == "tests":
                    found.append(f"{path.relative_to(root)}:{line}: {package} imports {target}")
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for package in RANK:
        for path in (root / package).rglob("*.py"):
            targets = {t for _, t in imported_packages(path) if t in RANK and t != package}
            graph.setdefault(package, set()).update(targets)
    return graph


def test_imports_only_point_down() -> None:
    assert violations(ROOT) == []


def test_no_two_packages_import_each_other() -> None:
    graph = import_graph(ROOT)
    mutual = sorted(
        f"{a} <-> {b}" for a, targets in graph.items() for b in targets if a in graph.get(b, ())
    )
    assert mutual == []


def modules(root: Path, package: str) -> dict[str, Path]:
    """Dotted name -> file of every module of a package (a sub-package as its __init__)."""
    found = {}
    for path in (root / package).rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def module_imports(path: Path, name: str, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that a module imports (``from pkg import mod`` names ``mod``)."""
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                here = name.split(".")
                base = here if path.name == "__init__.py" else here[:-1]
                module = ".".join(base[: len(base) - node.level + 1] + ([module] if module else []))
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                targets.add(sub if sub in known else module)
    return {t for t in targets if t in known and t != name}


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(graph[start])
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(graph[name])
    return seen


def import_circles(root: Path) -> list[list[str]]:
    """Every set of modules of one package that import each other round a circle, sorted."""
    circles: set[tuple[str, ...]] = set()
    for package in RANK:
        known = modules(root, package)
        graph = {name: module_imports(path, name, known) for name, path in known.items()}
        reach = {name: reachable(graph, name) for name in graph}
        for name in graph:
            circle = {other for other in reach[name] if name in reach[other]}
            if circle:
                circles.add(tuple(sorted(circle | {name})))
    return [list(circle) for circle in sorted(circles)]


def test_no_modules_of_one_package_import_each_other_in_a_circle() -> None:
    assert import_circles(ROOT) == []


def test_the_circle_check_catches_a_lazy_and_a_relative_import(tmp_path: Path) -> None:
    (tmp_path / "stack").mkdir()
    (tmp_path / "stack" / "__init__.py").write_text("")
    (tmp_path / "stack" / "table.py").write_text("from stack import row\n")
    (tmp_path / "stack" / "row.py").write_text("def f():\n    from .table import x\n")
    (tmp_path / "stack" / "service.py").write_text("import dataclasses\n")
    (tmp_path / "stack" / "other.py").write_text("from stack.service import Service\n")
    assert import_circles(tmp_path) == [["stack.row", "stack.table"]]


def test_every_package_is_placed_in_a_layer() -> None:
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests"}
    assert packages <= set(RANK), f"add {sorted(packages - set(RANK))} to LAYERS"


def test_the_check_catches_an_upward_and_a_lazy_import(tmp_path: Path) -> None:
    (tmp_path / "loadgen").mkdir()
    (tmp_path / "loadgen" / "ok.py").write_text("from tritonapi import client\nimport json\n")
    (tmp_path / "loadgen" / "bad.py").write_text(
        "def default():\n    from stack.settings import from_env\n    return from_env()\n"
    )
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "common.py").write_text("from tests.helpers import infer_add\n")
    assert violations(tmp_path) == [
        "bench/common.py:1: bench imports tests",
        "loadgen/bad.py:2: loadgen imports stack",
    ]


# Inside loadgen, highest first: the entry modules (actions, sequences, priorities...) stand on
# the run engine, which stands on reports, results and the wire clients; limits
# and errors are below them all. Imports inside one sub-package, and between the entry
# modules (priorities builds on sequences), are fine.
LOADGEN_LAYERS: list[tuple[str, ...]] = [
    ("actions", "split", "sequences", "priorities", "inputopts"),
    ("engine",),
    ("reports",),
    ("results",),
    ("clients",),
    ("limits",),
    ("errors",),
]
LOADGEN_RANK = {part: level for level, parts in enumerate(LOADGEN_LAYERS) for part in parts}


def loadgen_part(module: str) -> str | None:
    """The sub-package or top-level module of ``loadgen.<part>...`` (None: not loadgen's)."""
    parts = module.split(".")
    return parts[1] if parts[0] == "loadgen" and len(parts) > 1 else None


def loadgen_violations(root: Path) -> list[str]:
    found = []
    for path in sorted((root / "loadgen").rglob("*.py")):
        rel = path.relative_to(root / "loadgen")
        own = rel.parts[0].removesuffix(".py")
        if own == "__init__":
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            targets: list[str] = []
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [node.module]
                if node.module == "loadgen":
                    targets = [f"loadgen.{a.name}" for a in node.names]
            for target in targets:
                part = loadgen_part(target)
                if part is None or part == own:
                    continue
                if LOADGEN_RANK[part] <= LOADGEN_RANK[own] and not (
                    LOADGEN_RANK[part] == LOADGEN_RANK[own] == 0
                ):
                    found.append(f"loadgen/{rel}:{node.lineno}: {own} imports {part}")
    return found


def test_every_loadgen_part_is_placed_in_a_layer() -> None:
    parts = {p.name.removesuffix(".py") for p in (ROOT / "loadgen").iterdir()}
    parts -= {"__init__", "__pycache__"}
    assert parts <= set(LOADGEN_RANK), f"add {sorted(parts - set(LOADGEN_RANK))}"


def test_loadgen_parts_import_only_down_so_they_form_no_circle() -> None:
    assert loadgen_violations(ROOT) == []


def test_the_loadgen_check_catches_an_upward_import(tmp_path: Path) -> None:
    (tmp_path / "loadgen" / "results").mkdir(parents=True)
    (tmp_path / "loadgen" / "results" / "stored.py").write_text(
        "from loadgen.results.summary import LoadRun\n"
        "def f():\n    from loadgen.engine.runner import RunResult\n"
    )
    assert loadgen_violations(tmp_path) == ["loadgen/results/stored.py:3: results imports engine"]


def test_no_dashboard_module_shadows_a_package() -> None:
    """`streamlit run dashboard/app.py` puts dashboard/ first on sys.path, so a module there
    named like a top-level package (dashboard/runs.py beside runs/) is what `import runs`
    finds in the dashboard's process, and the page fails with an ImportError."""
    modules = {p.stem for p in (ROOT / "dashboard").glob("*.py")}
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert sorted(modules & packages) == []


# Issue 53: a module docstring says what the module does and why, in at most 15 lines;
# measured figures live on the manual's validation pages (docs/validation/), method detail in
# comments beside the code it explains.
DOCSTRING_MAX_LINES = 15


def long_docstrings(root: Path) -> list[str]:
    """Every module of the packages (bench/ and tests/ included) whose docstring is longer than
    DOCSTRING_MAX_LINES, as 'file: N lines'; dot-folders (.venv) are skipped."""
    found = []
    for package in sorted(p.parent for p in root.glob("*/__init__.py")):
        for path in sorted(package.rglob("*.py")):
            relative = path.relative_to(root)
            if any(part.startswith(".") for part in relative.parts):
                continue
            tree = ast.parse(path.read_text(), filename=str(path))
            doc = ast.get_docstring(tree, clean=False)
            if doc is not None and len(doc.splitlines()) > DOCSTRING_MAX_LINES:
                found.append(f"{relative}: {len(doc.splitlines())} lines")
    return found


def test_no_module_docstring_is_longer_than_15_lines() -> None:
    assert long_docstrings(ROOT) == []


def test_the_docstring_check_catches_a_long_one(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "short.py").write_text('"""One line."""\n')
    (tmp_path / "pkg" / "long.py").write_text('"""' + "line\n" * 16 + '"""\n')
    (tmp_path / "pkg" / ".hidden").mkdir()
    (tmp_path / "pkg" / ".hidden" / "long.py").write_text('"""' + "line\n" * 16 + '"""\n')
    assert long_docstrings(tmp_path) == ["pkg/long.py: 16 lines"]
