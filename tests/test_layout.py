"""The house rules of suite/, read from its source: each stage imports only the stages before it
(STAGES, the order docs/development.md gives), no module takes part in an import loop (lazy imports
inside functions count: they are loops all the same), no module reaches for another's private
names, and no function is longer than MAX_LINES."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SUITE = Path(__file__).resolve().parent.parent / "suite"

# The stages, earliest first: a module may import its own stage and the stages before it. `core` is
# the ground floor; `fleet` (which cases a machine runs) comes before `measure`, whose Ray executor
# deals out its settings; `cli` holds the entry point (`suite.__main__`).
STAGES = ("core", "scenario", "precisions", "models", "workloads", "fleet", "measure", "results", "analysis",
          "report", "pipeline", "cli")
# The analysis stage's subpackages, earliest first: each imports only itself and those before it.
ANALYSIS = ("frame", "roofline", "outcome", "advise", "regression", "interchange")
MAX_LINES = 60


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(SUITE.rglob("*.py")):
        name = ".".join(path.relative_to(SUITE.parent).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


MODULES = modules()


def stage(module: str) -> tuple[int, int]:
    """The stage of a module: its folder under suite/ (or, for a top-level module, its own name), and
    within `analysis` its subpackage (the package itself, which re-exports `load`, after them all)."""
    parts = module.split(".")
    if len(parts) == 1:  # the package itself: a version string and a docstring
        return 0, 0
    name = "cli" if parts[1] == "__main__" else parts[1]
    if name != "analysis":
        return STAGES.index(name), 0
    return STAGES.index(name), ANALYSIS.index(parts[2]) if len(parts) > 2 else len(ANALYSIS)


def imports(module: str, path: Path) -> list[tuple[str, int, str | None]]:
    """(module imported, line, name taken from it or None) of every import of suite in a module,
    functions' lazy imports included; `from pkg import sub` imports the submodule `pkg.sub`."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno, None) for alias in node.names if alias.name.split(".")[0] == "suite"]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            if base.split(".")[0] != "suite":
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.append((sub, node.lineno, None) if sub in MODULES else (base, node.lineno, alias.name))
    return [(target, line, name) for target, line, name in found if target != module]


GRAPH = {module: imports(module, path) for module, path in MODULES.items()}


def test_the_stages_are_the_folders_of_suite():
    folders = {p.name for p in SUITE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders | {"pipeline"} == set(STAGES)
    assert all(stage(module) >= (0, 0) for module in MODULES)
    analysis = SUITE / "analysis"
    assert {p.name for p in analysis.iterdir() if p.is_dir() and (p / "__init__.py").exists()} == set(ANALYSIS)
    assert not [p.name for p in analysis.glob("*.py") if p.name != "__init__.py"]  # every module in a subpackage


def test_each_analysis_subpackage_names_its_modules():
    """The analysis package's docstring names each subpackage, and each subpackage's docstring each
    of its modules (as `name`): where a concern's code lives is read there, not guessed."""
    analysis = SUITE / "analysis"
    package = ast.get_docstring(ast.parse((analysis / "__init__.py").read_text())) or ""
    unnamed = [f"analysis: {sub}" for sub in ANALYSIS if f"`{sub}`" not in package]
    for sub in ANALYSIS:
        doc = ast.get_docstring(ast.parse((analysis / sub / "__init__.py").read_text())) or ""
        unnamed += [f"{sub}: {p.stem}" for p in sorted((analysis / sub).glob("*.py"))
                    if p.name != "__init__.py" and f"`{p.stem}`" not in doc]
    assert not unnamed, unnamed


def test_no_stage_imports_a_later_one():
    later = [f"{MODULES[module].relative_to(SUITE.parent)}:{line} imports {target}"
             for module, found in GRAPH.items() for target, line, _ in found if stage(target) > stage(module)]
    assert not later, "\n".join(later)


def test_no_import_loop():
    edges = {module: {target for target, _, _ in found if target in MODULES} for module, found in GRAPH.items()}
    loops = [loop for loop in _strongly_connected(edges) if len(loop) > 1]
    assert not loops, f"import loops: {loops}"


def test_no_private_name_is_taken_from_another_module():
    taken = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        aliases = _module_aliases(tree, module, path)
        for target, line, name in GRAPH[module]:
            if name is not None and _private(name):
                taken.append(f"{path.relative_to(SUITE.parent)}:{line}: {name} from {target}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases \
                    and _private(node.attr):
                taken.append(f"{path.relative_to(SUITE.parent)}:{node.lineno}: {node.value.id}.{node.attr}")
    assert not taken, "\n".join(taken)


def test_no_function_is_longer_than_the_limit():
    long = []
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_LINES:
                    long.append(f"{path.relative_to(SUITE.parent)}:{node.lineno} {node.name}: {lines} lines")
    assert not long, "\n".join(long)


@pytest.mark.parametrize("source, loops", [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [{"a", "b", "c"}]),
    ({"a": {"b"}, "b": set(), "c": {"b"}}, []),
])
def test_the_loop_finder_finds_loops(source, loops):
    assert [set(loop) for loop in _strongly_connected(source) if len(loop) > 1] == loops


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _module_aliases(tree: ast.AST, module: str, path: Path) -> set[str]:
    """The names a module binds to other suite modules (`from suite.x import y` where y is a module,
    `import suite.x as y`)."""
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bound |= {alias.asname for alias in node.names if alias.asname and alias.name in MODULES}
        elif isinstance(node, ast.ImportFrom):
            targets = {t for t, line, name in GRAPH[module] if line == node.lineno and name is None}
            bound |= {alias.asname or alias.name for alias in node.names
                      if any(t.endswith(f".{alias.name}") for t in targets)}
    return bound


def _strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of a graph (a loop is a component of two or more)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            found.append(component)

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found
