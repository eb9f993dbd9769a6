"""The house keeps its shape: imports between stave's packages go one way (docs/architecture.md).

Every import in ``src/stave`` counts: at the top of a module, inside a function (a lazy import is
still a dependency), and under ``if TYPE_CHECKING:``. Relative imports are resolved. An edge is
allowed when the importing package's row in :data:`ALLOWED` names the imported package, or the
imported module (``"dist.timing"``: only that module of ``dist``).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "stave"

# Leaf modules every package may import: errors (StaveError), files (atomic writes), and the root
# package itself (``from stave import __version__``; its ``watch`` is loaded only on first use).
_LEAVES = {"errors", "files", "stave"}
# Below the doctor: what measures, in the order of docs/architecture.md.
_MEASURING = {"measure", "device", "monitor", "capture", "trace", "dist"}

# package -> what it may import besides itself and the leaves.
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "files": {"errors"},
    "device": set(),
    "measure": set(),
    "monitor": {"measure", "device", "analyze.stats"},
    "capture": {"measure", "device", "monitor"},
    # trace reduces events with analyze's plain statistics (median, percentile); nothing else above it.
    "trace": {"measure", "device", "analyze.stats"},
    "dist": {"measure", "device"},
    "analyze": {"measure", "device"},
    # Rules read the trace's and the distributed run's measurements, never their drivers.
    "diagnose": {"measure", "device", "analyze", "trace", "dist.sampling", "dist.timing"},
    # --verify runs the script with injected fixes and judges them with the ladder's loss check.
    "doctor": _MEASURING | {"analyze", "diagnose", "inject", "bench.losscheck"},
    # Renderers read the doctor's result (not the facade that runs things), findings, analyses, and
    # the ladder's result for the bench reports.
    "report": {"measure", "device", "analyze", "diagnose", "trace", "doctor.result", "bench.result"},
    "train": {"device"},
    # The loader shards by rank, read from the launcher's variables as the doctor reads them.
    "data": {"device", "dist.env"},
    # The ladder on a script injects its rungs' fixes (inject) into child runs of capture's Target.
    "bench": {"measure", "device", "analyze", "data", "train", "inject", "capture.runner"},
    # Fixes injected into the user's script: they run it through capture's runner, set device flags
    # through device, and reuse train's optimizer switch and precision choice.
    "inject": {"device", "capture", "train"},
    # Entry points: the command line, ``python -m stave`` and ``stave.watch()`` call the facades and render.
    "api": _MEASURING | {"analyze", "diagnose", "doctor", "report"},
    "cli": _MEASURING | {"analyze", "diagnose", "doctor", "report", "data", "train", "bench", "inject"},
    "__main__": {"cli"},
    "_native": set(),
}
# The root package's __init__ loads stave.watch lazily from the entry-point module.
ROOT_ALLOWED = {"api"}


def _modules() -> dict[str, tuple[Path, bool]]:
    out = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


def _imports(name: str, path: Path, is_pkg: bool) -> list[tuple[str, int]]:
    """Every module ``name`` imports (absolute names, relative ones resolved), with its line."""
    parts = name.split(".")
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = parts if is_pkg else parts[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            # ``from stave.dist import timing`` imports stave.dist.timing: the names may be modules.
            found += [(f"{module}.{alias.name}", node.lineno) for alias in node.names]
    return found


def _resolve(target: str, modules: dict[str, tuple[Path, bool]]) -> str | None:
    """The stave module ``target`` names (the longest existing prefix), or None outside stave."""
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return target or None


def _edges() -> dict[tuple[str, str], list[str]]:
    """(importing package, imported module relative to stave) -> where, for edges across packages."""
    modules = _modules()
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for name, (path, is_pkg) in modules.items():
        src_pkg = name.split(".")[1] if "." in name else "stave"
        for target, line in _imports(name, path, is_pkg):
            module = _resolve(target, modules)
            if module is None:
                continue
            rel = module.partition(".")[2] or "stave"
            if rel.split(".")[0] == src_pkg:
                continue
            edges[(src_pkg, rel)].append(f"{path.relative_to(SRC.parent.parent)}:{line}")
    return edges


def _allowed(src_pkg: str, module: str) -> bool:
    if src_pkg == "stave":
        return module.split(".")[0] in ROOT_ALLOWED
    allowed = ALLOWED[src_pkg] | _LEAVES
    pkg = module.split(".")[0]
    return pkg in allowed or any(module == a or module.startswith(a + ".") for a in allowed)


def test_every_package_has_a_row() -> None:
    packages = {p.stem if p.is_file() else p.name for p in SRC.iterdir()
                if (p.is_dir() and any(p.rglob("*.py"))) or p.suffix == ".py"}
    missing = packages - set(ALLOWED) - {"__init__"}
    assert not missing, f"packages with no row in ALLOWED (decide where they sit): {sorted(missing)}"


def test_imports_go_one_way() -> None:
    bad = [f"{src} -> {module}  ({', '.join(where[:3])})"
           for (src, module), where in sorted(_edges().items()) if not _allowed(src, module)]
    assert not bad, "imports against the package graph (docs/architecture.md):\n" + "\n".join(bad)


def test_the_table_has_no_cycle() -> None:
    """The allowed edges themselves go one way (a cycle in the table would allow one in the code)."""
    graph = {pkg: {a.split(".")[0] for a in allowed} - {pkg} for pkg, allowed in ALLOWED.items()}
    state: dict[str, int] = {}

    def visit(pkg: str, path: list[str]) -> None:
        state[pkg] = 1
        for nxt in sorted(graph.get(pkg, ())):
            if state.get(nxt) == 1:
                pytest.fail(f"cycle in ALLOWED: {' -> '.join([*path, pkg, nxt])}")
            if nxt not in state:
                visit(nxt, [*path, pkg])
        state[pkg] = 2

    for pkg in sorted(graph):
        if pkg not in state:
            visit(pkg, [])


def test_no_module_imports_itself_back() -> None:
    """No two modules import each other, directly or around a loop (TYPE_CHECKING and lazy imports count)."""
    modules = _modules()
    graph: dict[str, set[str]] = defaultdict(set)
    for name, (path, is_pkg) in modules.items():
        for target, _line in _imports(name, path, is_pkg):
            module = _resolve(target, modules)
            # A package's __init__ is not an edge back: importing stave.x.y always runs it first.
            if module and module != name and not name.startswith(module + "."):
                graph[name].add(module)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def strongconnect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(modules):
        if v not in index:
            strongconnect(v)
    assert not cycles, f"modules that import each other: {cycles}"


def test_the_checker_sees_lazy_type_checking_and_relative_imports(tmp_path: Path) -> None:
    """The scan reads what the test relies on: a guard against a checker that passes by seeing nothing."""
    pkg = tmp_path / "stave" / "trace"
    pkg.mkdir(parents=True)
    (tmp_path / "stave" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "m.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from stave.diagnose import finding\n"
        "def f():\n    from ..report import show\n"
        "from . import other\n"
    )
    found = {t for t, _ in _imports("stave.trace.m", pkg / "m.py", False)}
    assert {"stave.diagnose.finding", "stave.report.show", "stave.trace.other"} <= found
    assert not _allowed("trace", "diagnose.finding") and not _allowed("trace", "report.show")
    assert _allowed("diagnose", "trace.analysis") and not _allowed("diagnose", "dist.launch")
