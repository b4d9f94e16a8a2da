"""The side tables' statements (`<model>__late`, `__waterline`, `__pending`), made by macros.

The boundary: the step decides what it writes to a side table (which columns a table has, which
rows a step adds, when, under which step record: history.py, protocol.py); the package's macros
(dbt/include/streamsql/macros/side_tables/) say how the statements look: the CREATE with its
properties and clauses, the INSERT, MERGE or UPDATE that writes a step's rows. They dispatch,
so a project overrides one by defining `streamsql__create_late_table` (say) in its own macros.

`SideTableSql` turns the step's decisions into those macros' calls. Under dbt the
materialization, `streamsql_flush` and `streamsql_readmit` hand over the macros themselves
(`streamsql_side_table_macros`), called in the node's context: a project's overrides apply,
and see `config`, `this`, `var`. Outside dbt (unit tests, a step run from Python),
`package_macros` renders the same files with plain Jinja and dispatches to the package's
`default__` macros only.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Mapping, Optional, Sequence

import jinja2

from dbt.adapters.streamsql.execution.engine.statements import quote
from dbt.adapters.streamsql.planning.plan import Column
from dbt.include.streamsql import PACKAGE_PATH

# The kinds of side table, as the macros name them (`streamsql_create_<kind>_table`).
LATE, WATERLINE, PENDING = "late", "waterline", "pending"
# The macros the step calls, by name; the materialization hands over these.
MACROS = (
    "streamsql_create_late_table",
    "streamsql_create_waterline_table",
    "streamsql_create_pending_table",
    "streamsql_append_late_rows",
    "streamsql_append_waterline_rows",
    "streamsql_merge_pending_rows",
    "streamsql_mark_readmitted_rows",
)
MACRO_DIR = Path(PACKAGE_PATH) / "macros" / "side_tables"
# How dbt's dispatch picks an implementation for this adapter: its own, its parent's, default.
DISPATCH_PREFIXES = ("streamsql", "spark", "default")

MacroCall = Callable[..., Any]  # (macro name, keyword arguments) -> what the macro returns


class SideTableError(Exception):
    """A side-table macro returned no statement."""


@dataclass(frozen=True)
class QuotedTable:
    """A table as the macros see it outside dbt: renders as its quoted name, like a dbt
    relation with quoting on."""

    schema: str
    identifier: str

    def render(self) -> str:
        return f"{quote(self.schema)}.{quote(self.identifier)}"

    def __str__(self) -> str:
        return self.render()


class SideTableSql:
    """A step's statements for its side tables, each rendered by a macro."""

    def __init__(self, call: MacroCall, relation: Callable[[str, str], Any] = QuotedTable) -> None:
        self._call = call
        self._relation = relation

    def create_table(
        self,
        kind: str,
        schema: str,
        identifier: str,
        columns: Sequence[Column],
        replace: bool,
        location: Optional[str] = None,
    ) -> str:
        """CREATE OR REPLACE (`replace`) or CREATE TABLE IF NOT EXISTS of a side table, at
        `location` when given (the model's location_root)."""
        where = {"location": location} if location else {}
        return self._statement(
            f"streamsql_create_{kind}_table",
            schema,
            identifier,
            columns=list(columns),
            replace=bool(replace),
            **where,
        )

    def append_late_rows(
        self, schema: str, identifier: str, columns: Sequence[Column], rows: str
    ) -> str:
        return self._statement(
            "streamsql_append_late_rows", schema, identifier, columns=list(columns), rows=rows
        )

    def append_waterline_rows(
        self, schema: str, identifier: str, columns: Sequence[Column], rows: str
    ) -> str:
        return self._statement(
            "streamsql_append_waterline_rows", schema, identifier, columns=list(columns), rows=rows
        )

    def merge_pending_rows(
        self, schema: str, identifier: str, columns: Sequence[Column], changes: str, step: int
    ) -> str:
        return self._statement(
            "streamsql_merge_pending_rows",
            schema,
            identifier,
            columns=list(columns),
            changes=changes,
            step=step,
        )

    def mark_readmitted_rows(self, schema: str, identifier: str, condition: str, step: int) -> str:
        return self._statement(
            "streamsql_mark_readmitted_rows", schema, identifier, condition=condition, step=step
        )

    def _statement(self, macro: str, schema: str, identifier: str, **arguments: Any) -> str:
        rendered = self._call(macro, relation=self._relation(schema, identifier), **arguments)
        statement = str(rendered if rendered is not None else "").strip()
        while statement.endswith(";"):  # one statement, sent as it is: no terminator
            statement = statement[:-1].rstrip()
        if not statement:
            raise SideTableError(
                f"the macro {macro} returned no statement for {schema}.{identifier}"
            )
        return statement


def dbt_macros(macros: Mapping[str, Callable[..., Any]]) -> MacroCall:
    """Calls of the macros dbt handed over (`streamsql_side_table_macros`), by name."""
    missing = [name for name in MACROS if name not in macros]
    if missing:
        raise SideTableError(f"the side-table macros {', '.join(missing)} were not handed over")

    def call(name: str, **arguments: Any) -> Any:
        return macros[name](**arguments)

    return call


@functools.lru_cache(maxsize=None)
def package_macros() -> MacroCall:
    """The package's side-table macros rendered with plain Jinja, without dbt: `adapter.dispatch`
    picks the package's own implementation (no project overrides), `return` returns, and a
    macro calls one of another file by its bare name, as in dbt."""
    found: Dict[str, Any] = {}

    class Dispatcher:
        @staticmethod
        def dispatch(name: str, namespace: str = "") -> Any:
            for prefix in DISPATCH_PREFIXES:
                macro = found.get(f"{prefix}__{name}")
                if macro is not None:
                    return macro
            raise SideTableError(f"no macro implements {name}")

    def later(name: str) -> Callable[..., Any]:  # a macro looked up when called
        return lambda *args, **kwargs: found[name](*args, **kwargs)

    environment = jinja2.Environment(extensions=["jinja2.ext.do"], undefined=jinja2.StrictUndefined)
    sources = [path.read_text() for path in sorted(MACRO_DIR.glob("*.sql"))]
    context: Dict[str, Any] = {"adapter": Dispatcher(), "return": lambda value: value}
    for source in sources:
        context.update(
            {
                macro.name: later(macro.name)
                for macro in environment.parse(source).find_all(jinja2.nodes.Macro)
            }
        )
    for source in sources:
        module = environment.from_string(source, globals=dict(context)).module
        found.update(
            {
                name: getattr(module, name)
                for name in dir(module)
                if not name.startswith("_") and callable(getattr(module, name))
            }
        )

    def call(name: str, **arguments: Any) -> Any:
        return found[name](**arguments)

    return call


def default_side_table_sql() -> SideTableSql:
    return SideTableSql(package_macros())
