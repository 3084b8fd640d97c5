"""The package's layout holds: the layering table of docs/architecture.md (which package may
import which), no import cycle inside lstm_ort (imports inside functions count), and the runtime
(what inference loads) needs neither the rewriter nor onnxscript."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

import lstm_ort

PACKAGE = Path(lstm_ort.__file__).parent
ARCHITECTURE = Path(__file__).parents[1] / "docs" / "architecture.md"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The lstm_ort modules a file imports anywhere in it (from-imports of names resolve to their module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from pkg import submodule` depends on the submodule; `from mod import name` on mod.
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                     for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    return found


def third_party_imports(path: Path) -> set[str]:
    """The top-level names of what a file imports from outside lstm_ort, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found - {"lstm_ort"}


def import_graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PACKAGE.rglob("*.py") if not p.name.endswith("_test.py")}
    modules = set(files)
    graph = {}
    for name, path in files.items():
        # A package's submodule imports its parent package's __init__ only as a side effect of
        # Python's machinery, not as a dependency of its own.
        graph[name] = {m for m in imports_of(path, modules) if m != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_import_cycle():
    graph = import_graph()
    assert "lstm_ort.runtime.session" in graph and "lstm_ort.rewriter.driver" in graph
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_cycle_finder_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_runtime_imports_no_rewriter():
    graph = import_graph()
    runtime = {m for m in graph if m.startswith("lstm_ort.runtime") or m.startswith("lstm_ort.ops")}
    reached, pending = set(), list(runtime)
    while pending:
        m = pending.pop()
        if m not in reached:
            reached.add(m)
            pending.extend(graph.get(m, ()))
    assert not {m for m in reached if m.startswith(("lstm_ort.rewriter", "lstm_ort.tuning", "lstm_ort.cli"))}


def test_inference_loads_neither_rewriter_nor_onnxscript():
    code = ("import sys, lstm_ort; lstm_ort.InferenceSession; import lstm_ort.runtime.native; "
            "print(sorted(m for m in sys.modules if m.startswith(('onnxscript', 'onnx_ir', 'lstm_ort.rewriter'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def unit_of(module: str, table: dict | None = None) -> str:
    """The table's row a module belongs to: the most specific the table has (a module of a package
    may have a row of its own), else its package under lstm_ort, or its own name."""
    parts = module.split(".")
    if len(parts) == 1:
        return "lstm_ort"
    for end in range(len(parts), 2, -1):
        if table and "/".join(parts[1:end]) in table:
            return "/".join(parts[1:end])
    return parts[1]


def layering_table() -> dict[str, tuple[set[str], set[str]]]:
    """docs/architecture.md's "Python packages" table: unit -> (the lstm_ort packages or modules it
    may import, the outside modules it never imports)."""
    section = ARCHITECTURE.read_text().split("## Python packages", 1)[1].split("\n## ", 1)[0]
    table = {}
    for row in (line for line in section.splitlines() if line.startswith("| `lstm_ort")):
        first, _, may = (cell.strip() for cell in row.strip().strip("|").split(" | "))
        allowed, _, never = may.partition("never")
        rule = set(re.findall(r"`([\w.*]+)`", allowed)), set(re.findall(r"`([\w.]+)`", never))
        for path in re.findall(r"`(lstm_ort/[^`]*)`", first):
            name = path.removeprefix("lstm_ort/").rstrip("/").removesuffix(".py")
            table["lstm_ort" if name == "__init__" else name] = rule
    return table


def breaks(graph: dict[str, set[str]], table: dict) -> list[str]:
    out = []
    for module, deps in sorted(graph.items()):
        unit = unit_of(module, table)
        if unit not in table:
            out.append(f"{module}: no row of the table")
            continue
        allowed, _ = table[unit]
        for dep in sorted(deps):
            name = dep.removeprefix("lstm_ort.")
            if unit_of(dep, table) == unit or "*" in allowed or any(name == a or name.startswith(a + ".") for a in allowed):
                continue
            out.append(f"{module} imports {dep}, which its row ({unit}) does not name")
    return out


@pytest.mark.skipif(not ARCHITECTURE.exists(), reason="docs/architecture.md is not beside these tests")
def test_layering_table_of_the_architecture_doc_holds():
    table = layering_table()
    assert {"ops", "graph", "runtime", "rewriter", "verify", "serving", "pipeline", "cli"} <= set(table)
    assert breaks(import_graph(), table) == []
    files = {module_name(p): p for p in PACKAGE.rglob("*.py") if not p.name.endswith("_test.py")}
    never = [f"{m} imports {x}" for m, path in sorted(files.items()) if unit_of(m, table) in table
             for x in sorted(third_party_imports(path) & table[unit_of(m, table)][1])]
    assert never == []


def test_layering_check_finds_a_break():
    table = {"ops": ({"numpy"}, set()), "rewriter": ({"ops", "runtime.model_io"}, set()), "runtime": ({"ops"}, set())}
    graph = {"lstm_ort.ops.identity": set(), "lstm_ort.runtime.nodes": {"lstm_ort.ops.identity"},
             "lstm_ort.rewriter.driver": {"lstm_ort.runtime.model_io", "lstm_ort.runtime.session"},
             "lstm_ort.extra": set()}
    assert breaks(graph, table) == [
        "lstm_ort.extra: no row of the table",
        "lstm_ort.rewriter.driver imports lstm_ort.runtime.session, which its row (rewriter) does not name"]
