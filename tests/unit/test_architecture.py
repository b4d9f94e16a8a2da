"""The shape of dbt/: no import cycle between the package's modules, execution/'s rooms in layers
that import only downwards, no module over 600 lines, no function over 7 parameters.

Imports are read from the source (ast), every one of them: at module level, inside functions and
under `if TYPE_CHECKING:`, because a cycle hidden in a function is still a cycle in the design.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "dbt" / "adapters" / "streamsql"
PREFIX = "dbt.adapters.streamsql"
MAX_LINES = 600


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def package_modules() -> Dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imported_modules(source: str, name: str, is_package: bool, known: Set[str]) -> Set[str]:
    """The package's modules that module `name` imports, wherever in its source the import is."""
    found: Set[str] = set()

    def add(candidate: str) -> None:
        # `from a.b import c` may import module a.b.c or name c of a.b: take the longest module
        while candidate and candidate not in known:
            candidate = candidate.rpartition(".")[0]
        if candidate.startswith(PREFIX) and candidate != name:
            found.add(candidate)

    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name if is_package else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    anchor = anchor.rpartition(".")[0]
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                add(f"{base}.{alias.name}")
    # a module's own parent packages are imported by Python anyway, and say nothing of the design
    return {m for m in found if not name.startswith(m + ".")}


def import_cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    cycles: List[List[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_cycles(graph) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_the_import_reader_sees_every_import():
    known = {f"{PREFIX}.a", f"{PREFIX}.a.b", f"{PREFIX}.c", f"{PREFIX}.d", f"{PREFIX}.e"}
    source = """
from typing import TYPE_CHECKING
from dbt.adapters.streamsql.a import b
from . import c
if TYPE_CHECKING:
    from .d import Thing
def late():
    import dbt.adapters.streamsql.e
    from dbt.artifacts.resources import ModelConfig
"""
    found = imported_modules(source, f"{PREFIX}.x", False, known)
    assert found == {f"{PREFIX}.a.b", f"{PREFIX}.c", f"{PREFIX}.d", f"{PREFIX}.e"}


def module_graph() -> Dict[str, Set[str]]:
    modules = package_modules()
    return {
        name: imported_modules(path.read_text(), name, path.name == "__init__.py", set(modules))
        for name, path in modules.items()
    }


def test_no_import_cycle_in_the_package():
    cycles = import_cycles(module_graph())
    assert not cycles, "modules that import each other (directly or around a loop):\n" + "\n".join(
        "  " + " <-> ".join(c) for c in cycles
    )


EXECUTION = f"{PREFIX}.execution"

# execution/'s layers, bottom first (docs/architecture.md draws them): a module may import its own
# layer's modules and those of the layers below, never one above. Each layer names its modules by
# their path under execution/, a room (subpackage) or one module; a module belongs to the longest
# path that holds it, "" is execution/ itself. A module no layer holds fails the test: say where
# a new one belongs.
LAYERS = (
    # Spark and Delta: the SQL session, the Delta log, statement text, the side tables' macros
    ("engine", ("engine",)),
    # the data types every layer above passes around (they may hold the engine's session and
    # commits): the model's settings and configs, the step's context, state, record, writes,
    # inputs, result, errors. context.py, step_state.py and commit/record.py belong in shared/
    # and are to move there (git mv) once the edits in flight on them land.
    ("shared", ("shared", "context", "step_state", "commit.record")),
    # LATENESS, WATERMARK and emit_final: which rows are late, held or final, as SQL
    ("event_time", ("event_time",)),
    # the model's tables and aggregate state, the step's writes in their exactly-once order
    ("commit", ("commit",)),
    # schema change, lost history, retention
    ("recovery", ("recovery",)),
    # the phases of a step: inputs, the plan's decision, the change, keys
    ("pipeline", ("pipeline",)),
    # what dbt calls: a step (run_step), streamsql_explain, streamsql_lateness_report,
    # streamsql_readmit
    (
        "entry points",
        ("", "pipeline.step", "explain", "plan_advice", "lateness_report", "readmit"),
    ),
)


def layer_of(name: str) -> int:
    """The index in LAYERS of execution module `name` (its path under execution/); -1: none."""
    found, longest = -1, -1
    for index, (_, paths) in enumerate(LAYERS):
        for path in paths:
            holds = name == path or (path != "" and name.startswith(path + "."))
            if holds and len(path) > longest:
                found, longest = index, len(path)
    return found


def upward_imports(graph: Dict[str, Set[str]]) -> List[str]:
    """Each import, among execution's modules, of a module in a layer above the importer's."""
    found = []
    for name in sorted(graph):
        if name != EXECUTION and not name.startswith(EXECUTION + "."):
            continue
        here = layer_of(name[len(EXECUTION) + 1 :])
        for imported in sorted(graph[name]):
            if not imported.startswith(EXECUTION + "."):
                continue
            there = layer_of(imported[len(EXECUTION) + 1 :])
            if here >= 0 and there > here:  # a module in no layer: the test below names it
                found.append(
                    f"{name[len(EXECUTION) + 1 :] or 'execution'} ({LAYERS[here][0]}) imports "
                    f"{imported[len(EXECUTION) + 1 :]} ({LAYERS[there][0]})"
                )
    return found


def test_the_layer_reader_finds_an_upward_import():
    assert LAYERS[layer_of("commit.tables")][0] == "commit"
    assert LAYERS[layer_of("commit.record")][0] == "shared"
    assert LAYERS[layer_of("pipeline.step")][0] == "entry points"
    assert LAYERS[layer_of("")][0] == "entry points"
    assert layer_of("somewhere_new") == -1
    graph = {
        f"{EXECUTION}.commit.tables": {f"{EXECUTION}.pipeline.inputs", f"{EXECUTION}.engine.views"},
        f"{EXECUTION}.pipeline.inputs": {f"{EXECUTION}.commit.record", f"{PREFIX}.planning.plan"},
        f"{EXECUTION}.commit.record": {f"{EXECUTION}.commit.protocol"},
    }
    assert upward_imports(graph) == [
        "commit.record (shared) imports commit.protocol (commit)",
        "commit.tables (commit) imports pipeline.inputs (pipeline)",
    ]


def test_every_execution_module_is_in_a_layer():
    names = [n[len(EXECUTION) + 1 :] for n in package_modules() if n.startswith(EXECUTION + ".")]
    assert not [n for n in names if layer_of(n) < 0], (
        "modules of execution/ in no layer: name their layer in LAYERS (test_architecture.py)"
    )


def test_no_import_runs_up_a_layer():
    """execution/'s rooms depend one way (STYLE.md, "Rooms and layers"), wherever the import is."""
    upward = upward_imports(module_graph())
    assert not upward, "imports that run up a layer:\n" + "\n".join("  " + u for u in upward)


DOC = ROOT / "docs" / "architecture.md"


def documented_layers(text: str) -> List[Tuple[str, Tuple[str, ...]]]:
    """docs/architecture.md's table of execution/'s layers: (layer, its paths as LAYERS writes
    them), bottom first."""
    lines = text.splitlines()
    start = lines.index("| layer | paths under execution/ | why it sits here |") + 2
    layers = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        layer, paths = [cell.strip() for cell in line.strip("|").split("|")][:2]
        dotted = []
        for path in re.findall(r"`([^`]+)`", paths):
            path = "" if path == "__init__.py" else path.rstrip("/")
            dotted.append(path[: -len(".py")].replace("/", ".") if path.endswith(".py") else path)
        layers.append((layer, tuple(dotted)))
    return layers


def test_the_docs_draw_the_layers_the_test_enforces():
    assert documented_layers(DOC.read_text()) == [(n, tuple(p)) for n, p in LAYERS]


@pytest.mark.parametrize("name", sorted(package_modules()))
def test_no_module_is_over_600_lines(name):
    lines = len(package_modules()[name].read_text().splitlines())
    assert lines <= MAX_LINES, f"{name} has {lines} lines: split it by concern"


MAX_PARAMETERS = 7


def parameter_count(node: ast.AST) -> int:
    """A function's parameters, a method's `self` or `cls` not counted."""
    args = node.args  # type: ignore[attr-defined]
    names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
    if names and names[0] in ("self", "cls"):
        names = names[1:]
    return len(names)


def test_the_parameter_counter_counts():
    tree = ast.parse("def f(a, b=1, *c, d, **e): pass\nclass K:\n    def m(self, a): pass")
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    assert [parameter_count(f) for f in functions] == [5, 1]


def test_no_function_takes_more_than_seven_parameters():
    """More than a handful of arguments asks for an object that names them (STYLE.md)."""
    over = []
    for name, path in package_modules().items():
        for node in ast.walk(ast.parse(path.read_text(), name)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if parameter_count(node) > MAX_PARAMETERS:
                    over.append(f"{name}.{node.name} ({parameter_count(node)})")
    assert not over, "functions with more than 7 parameters: " + ", ".join(over)


SPARK_ROOM = f"{PREFIX}.spark"
HOST_MODULES = ("embedded_spark", "warm_server", "table_warmer", "log_store")
# The dbt-facing modules start and reach Spark through the room; the room serves them and knows
# nothing of them, of the step (execution/) or of the planner.
ABOVE_THE_SPARK_ROOM = [f"{PREFIX}.{name}" for name in ("impl", "connections", "cli")]
NOT_IMPORTED_BY_THE_SPARK_ROOM = [
    *ABOVE_THE_SPARK_ROOM,
    f"{PREFIX}.execution",
    f"{PREFIX}.planning",
]


def within(module: str, room: str) -> bool:
    return module == room or module.startswith(room + ".")


def imports_out_of_room(graph: Dict[str, Set[str]], room: str, forbidden: List[str]) -> List[str]:
    """Every import by a module of `room` of a module in (or under) one of `forbidden`."""
    return [
        f"{name} imports {imported}"
        for name in sorted(graph)
        if within(name, room)
        for imported in sorted(graph[name])
        if any(within(imported, other) for other in forbidden)
    ]


def test_the_room_check_finds_an_import_up_out_of_a_room():
    graph = {
        "p.room.a": {"p.room.b", "p.base"},
        "p.room.b": {"p.top.x"},
        "p.top": {"p.room.a"},
        "p.roomy": {"p.top"},  # a neighbour whose name begins like the room's
    }
    assert imports_out_of_room(graph, "p.room", ["p.top"]) == ["p.room.b imports p.top.x"]


def test_the_spark_host_is_a_room_of_its_own():
    modules = package_modules()
    assert {f"{SPARK_ROOM}.{name}" for name in HOST_MODULES} <= set(modules)
    loose = [name for name in HOST_MODULES if f"{PREFIX}.{name}" in modules]
    assert not loose, f"Spark host modules outside spark/: {loose}"
    assert (PACKAGE / "spark" / "jvm" / "ListFromLogStore.java").is_file()


def test_the_spark_room_imports_nothing_above_it():
    upward = imports_out_of_room(module_graph(), SPARK_ROOM, NOT_IMPORTED_BY_THE_SPARK_ROOM)
    assert not upward, (
        "the Spark host (spark/) is below impl, connections and cli, beside execution/ and "
        "planning/, and imports none of them:\n  " + "\n  ".join(upward)
    )


def test_the_dbt_facing_modules_reach_spark_through_its_room():
    graph = module_graph()
    users = {
        name for name in ABOVE_THE_SPARK_ROOM if any(within(m, SPARK_ROOM) for m in graph[name])
    }
    assert {f"{PREFIX}.connections", f"{PREFIX}.cli"} <= users
