"""The package's layout holds: no import cycle inside lstm_ort (imports inside functions count),
and the runtime (what inference loads) needs neither the rewriter nor onnxscript."""

import ast
import subprocess
import sys
from pathlib import Path

import lstm_ort

PACKAGE = Path(lstm_ort.__file__).parent


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
