"""The package's modules import each other without a circle, counting imports inside functions too: the house is
built from the bottom (trajectories, environments, statistics) up (rollout, evaluation, trainer, Hub). The package's
own ``__init__`` is left out: it imports lazily, on attribute access, for users."""

import ast
from pathlib import Path

import trl_starpo

PACKAGE = Path(trl_starpo.__file__).parent


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def imported_modules(name: str) -> set[str]:
    """The package's modules that module ``name`` imports, anywhere in its code."""
    package = name if MODULES[name].name == "__init__.py" else name.rsplit(".", 1)[0]
    targets = []
    for node in ast.walk(ast.parse(MODULES[name].read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rsplit(".", 1)[0]
            module = (base + ("." + node.module if node.module else "")) if node.level else (node.module or "")
            targets += [f"{module}.{alias.name}" for alias in node.names] + [module]
    found = set()
    for target in targets:
        while target not in MODULES and "." in target:
            target = target.rsplit(".", 1)[0]
        if target in MODULES and target not in (name, "trl_starpo"):
            found.add(target)
    return found


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_no_module_of_the_package_imports_itself_round_a_circle():
    graph = {name: imported_modules(name) for name in MODULES if name != "trl_starpo"}
    assert circles(graph) == []


def test_the_circle_finder_finds_one():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert "trl_starpo.statistics" in imported_modules("trl_starpo.hub.cards")
    assert imported_modules("trl_starpo.statistics") == set()
