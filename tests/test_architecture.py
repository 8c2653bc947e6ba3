"""The import structure of ``src/gpuplan``, read from the AST (nothing is imported or run).

Three rules (docs/architecture.md, DESIGN.md "One copy of each rule"):

(a) no import cycle between modules, counting every import: at module level, inside functions (they
    run, only later) and under ``if TYPE_CHECKING:`` (a type a module names is a dependency too);
(b) no import from a lower layer up (``LAYERS`` below, lowest first), counted the same way;
(c) no cross-package import of a ``_private`` name (a name or a module whose last part starts with
    one underscore; ``__dunder__`` names are public).

Each rule has an allow-list of the violations present when the test was written. The lists only
shrink: an entry that no longer occurs fails the test too, so whoever fixes a violation deletes its
entry in the same change.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
PACKAGE = "gpuplan"

# Lowest first. A module may import from its own layer (other than in a cycle) or any layer below.
# userio (bounded reads of user files) needs only errors/units. compat (environment probe, compatibility
# rules, explainers) needs only errors/units, so it sits with the data packages; nothing in the numeric
# pipeline uses it.
# report renders every result type, so it sits above them all (issue 19: results are plain data, and no
# result module imports report/; gpuplan/presentation.py is the registry their to_dict()/str() ask).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "units", "dtypes", "scaled_formats", "workload", "userio", "version", "extras", "presentation"),
    ("hardware", "models", "compat"),
    ("memory",),
    ("trace",),
    ("perf",),
    ("estimate", "simulate"),
    ("parallel",),
    ("serve",),
    ("advise",),
    ("rl",),           # RL post-training: the trainer through estimate/parallel, the rollout through serve
    ("measure",),
    ("report",),
    ("cli", "ui", "__main__"),  # __main__: `python -m gpuplan`, the command line
)

# --- allow-lists: today's violations, each to be deleted when fixed -----------------------------

# (a) cycles, as the sorted modules of each strongly connected component
ALLOWED_CYCLES: frozenset[tuple[str, ...]] = frozenset()  # the last (models.pipeline ↔ pipeline_program) fixed
# in issue 19: the plain pipeline types moved down to models/pipeline_spec.py; keep it empty

# (b) (importer, imported) module pairs that run up a layer
ALLOWED_UPWARD: frozenset[tuple[str, str]] = frozenset()  # all fixed in issue 9: keep it empty

# (c) (importer, "module.name") cross-package imports of private names
ALLOWED_PRIVATE: frozenset[tuple[str, str]] = frozenset()  # all fixed in issue 9: keep it empty


@dataclass(frozen=True)
class Import:
    importer: str  # dotted module name of the importing file
    target: str  # dotted module the import resolves to (a submodule where the name is one)
    name: str | None  # the imported name for ``from x import name`` when it is not a module
    line: int


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import: at module level, in functions and classes, and under TYPE_CHECKING."""
    for child in ast.walk(node):
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child


def _runtime_import_nodes(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import that can run: at module level, in functions and classes, not under TYPE_CHECKING."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child):
            for other in child.orelse:
                yield from _runtime_import_nodes_of(other)
            continue
        yield from _runtime_import_nodes_of(child)


def _runtime_import_nodes_of(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node
    else:
        yield from _runtime_import_nodes(node)


def _imports(module: str, path: Path) -> list[Import]:
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: list[Import] = []
    for node in _import_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [Import(module, alias.name, None, node.lineno) for alias in node.names]
            continue
        if node.level:
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        for alias in node.names:
            submodule = f"{source}.{alias.name}"
            if submodule in MODULES:
                found.append(Import(module, submodule, None, node.lineno))
            else:
                found.append(Import(module, source, alias.name, node.lineno))
    return [imp for imp in found if imp.target == PACKAGE or imp.target.startswith(PACKAGE + ".")]


IMPORTS: list[Import] = [imp for module, path in MODULES.items() for imp in _imports(module, path)]


def _unit(module: str) -> str:
    """The package (or top-level module) a module belongs to: ``gpuplan.trace.step`` -> ``trace``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _layer(module: str) -> int:
    unit = _unit(module)
    if unit == "":  # gpuplan/__init__: the public API, above everything
        return len(LAYERS)
    for rank, units in enumerate(LAYERS):
        if unit in units:
            return rank
    raise AssertionError(f"{module}: package {unit!r} has no layer; add it to LAYERS in {__file__}")


def _cycles() -> set[tuple[str, ...]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for imp in IMPORTS:
        if imp.target in MODULES and imp.target != imp.importer:
            graph[imp.importer].add(imp.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: set[tuple[str, ...]] = set()
    for root in graph:
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.add(tuple(sorted(component)))
    return components


def _upward() -> dict[tuple[str, str], int]:
    return {
        (imp.importer, imp.target): imp.line
        for imp in IMPORTS
        if imp.target in MODULES and _layer(imp.target) > _layer(imp.importer)
    }


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private() -> dict[tuple[str, str], int]:
    found: dict[tuple[str, str], int] = {}
    for imp in IMPORTS:
        if _unit(imp.importer) == _unit(imp.target) and _unit(imp.target) != "":
            continue
        module_parts = imp.target.split(".")
        if any(_is_private(part) for part in module_parts) or (imp.name is not None and _is_private(imp.name)):
            found[(imp.importer, f"{imp.target}.{imp.name}" if imp.name else imp.target)] = imp.line
    return found


def _check(kind: str, found: set[tuple[str, ...]] | dict[tuple[str, str], int],
           allowed: frozenset[tuple[str, ...]]) -> None:
    new = sorted(set(found) - allowed)
    gone = sorted(allowed - set(found))
    lines = []
    if new:
        where = [f"  {entry}" + (f" (line {found[(entry[0], entry[1])]})" if isinstance(found, dict) else "")
                 for entry in new]
        lines += [f"new {kind} (fix the import; see docs/architecture.md):", *where]
    if gone:
        lines += [f"fixed {kind}, delete from the allow-list in tests/test_architecture.py:"]
        lines += [f"  {entry}" for entry in gone]
    assert not lines, "\n".join(lines)


def test_every_module_is_parsed_and_every_package_has_a_layer() -> None:
    assert "gpuplan.estimate" in MODULES and "gpuplan.cli.main" in MODULES
    for module in MODULES:
        _layer(module)


def test_no_runtime_import_cycle() -> None:
    _check("import cycles", _cycles(), ALLOWED_CYCLES)
    assert ALLOWED_CYCLES == frozenset() and len(_cycles()) == 0  # issue 19: 0 circles, none allowed


def test_no_import_from_a_lower_layer_up() -> None:
    _check("upward imports", _upward(), ALLOWED_UPWARD)
    assert ALLOWED_UPWARD == frozenset() and len(_upward()) == 0  # issue 19: 0 upward imports, none allowed


def test_no_cross_package_import_of_a_private_name() -> None:
    _check("private imports", _private(), ALLOWED_PRIVATE)


def test_the_checker_sees_function_level_and_type_checking_imports() -> None:
    """The walker itself: a lazy import counts, and so does an annotation-only one (issue 19: the four
    result <-> report circles ran through function-level and TYPE_CHECKING imports)."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from gpuplan.cli.main import main\n"
        "def f():\n    from gpuplan.advise.fit import _x\n"
    )
    nodes = list(_import_nodes(ast.parse(source)))
    assert [getattr(n, "module", None) for n in nodes] == ["typing", "gpuplan.cli.main", "gpuplan.advise.fit"]
    runtime = list(_runtime_import_nodes(ast.parse(source)))
    assert [getattr(n, "module", None) for n in runtime] == ["typing", "gpuplan.advise.fit"]


def test_no_result_module_imports_report() -> None:
    """Results are plain data; report/ renders them (docs/architecture.md)."""
    found = sorted({imp.importer for imp in IMPORTS
                    if _unit(imp.target) == "report" and _unit(imp.importer) not in ("report", "cli", "ui", "")})
    assert found == []


# Written in pieces so that this file does not match itself.
MACHINE_PATHS = tuple("/" + top + "/" for top in ("work", "root", "home"))


def test_no_absolute_machine_path_in_tracked_files() -> None:
    """Files that name one machine's directories break everywhere else: reach shared data as
    ``../shared`` relative to the repository root instead (and skip where it is absent)."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    found = []
    for name in filter(None, listed.decode().split("\0")):
        path = REPO / name
        if not path.is_file():  # deleted in the working tree, not yet committed
            continue
        data = path.read_bytes()
        if b"\0" in data:  # binary
            continue
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if any(machine in line for machine in MACHINE_PATHS):
                found.append(f"{name}:{number}: {line.strip()[:120]}")
    assert not found, "absolute machine paths (use ../shared relative to the repository root):\n" + "\n".join(found)
