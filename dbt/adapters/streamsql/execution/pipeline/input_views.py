"""Inputs that are views: the step plans the model's query with each view's query in its place.

A view holds no data and has no change feed, so a step cannot read what changed in it; it can
read what changed in the tables the view reads. dbt projects stage their sources in `view`
models, so an incremental_view over one is common. Before it reads its inputs, a step replaces
each view the model's query reads by the view's own query (as dbt does with an ephemeral
model), in the catalog's words (`DESCRIBE TABLE EXTENDED`: its text, the schema its unqualified
names resolve in, its output columns), until every input is a table: views of views
included, up to MAX_DEPTH. The query the step plans, fingerprints and records is the one with
the views in it, so a view whose definition changed is a changed query (the next run asks for a
full refresh), and the step's inputs are the view's tables.

Only inputs that the Delta log cannot read are asked about, so a model that reads tables sends
no statement for this.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

from sqlglot import exp

from dbt.adapters.streamsql.execution.context import StepContext
from dbt.adapters.streamsql.execution.engine.delta_log import quoted
from dbt.adapters.streamsql.execution.pipeline import inputs
from dbt.adapters.streamsql.execution.pipeline.inputs import InputUnreadable
from dbt.adapters.streamsql.execution.shared.errors import StepError
from dbt.adapters.streamsql.execution.shared.input_state import InputState
from dbt.adapters.streamsql.planning.binding import input_references, parse_query
from dbt.adapters.streamsql.planning.plan import DIALECT
from dbt.adapters.streamsql.planning.references import normalize_table_name

# Views of views are inlined this deep at most (a cycle cannot be created in Spark's catalog,
# but a runaway chain should stop with a message).
MAX_DEPTH = 10


@dataclass(frozen=True)
class ViewDefinition:
    name: str  # schema.view, as the model's query names it (normalized)
    text: str  # the view's query
    namespace: str  # the schema its unqualified table names resolve in
    columns: Tuple[str, ...]  # its output columns, as the catalog lists them


def describe_inputs(ctx: StepContext, compiled_sql: str) -> Tuple[str, List[InputState]]:
    """The model's query with the views it reads replaced by their queries, and its inputs
    (tables only: inputs.describe_inputs)."""
    sql = compiled_sql
    inlined: List[str] = []
    described: Dict[str, InputState] = {}  # each table read once, however many views inlined
    for _ in range(MAX_DEPTH + 1):
        try:
            return sql, inputs.describe_inputs(ctx, sql, described)
        except InputUnreadable as unreadable:
            view = view_definition(ctx.session.query, unreadable.name)
            if view is None:
                raise
            sql = with_view(sql, view)
            inlined.append(view.name)
            ctx.views_read = list(inlined)
    raise StepError(
        f"Model {ctx.model.name} reads views of views more than {MAX_DEPTH} deep "
        f"({' -> '.join(inlined)}). Materialize one of them as a table or incremental_view."
    )


def view_definition(query: Callable[[str], List[dict]], name: str) -> Optional[ViewDefinition]:
    """The view `name` as the catalog describes it; None when it is not a view (or missing)."""
    try:
        rows = query(f"DESCRIBE TABLE EXTENDED {quoted(name)}")
    except Exception:  # missing, or not describable: the caller's own error stands
        return None
    info = {str(row.get("col_name") or "").strip(): row.get("data_type") for row in rows}
    if str(info.get("Type") or "").upper() != "VIEW" or not info.get("View Text"):
        return None
    namespace = str(info.get("View Catalog and Namespace") or info.get("Database") or "")
    columns = str(info.get("View Query Output Columns") or "").strip("[]")
    return ViewDefinition(
        name=name,
        text=str(info["View Text"]),
        namespace=namespace.split(".")[-1],
        columns=tuple(
            part.strip().strip("`").replace("``", "`")
            for part in columns.split(",")
            if part.strip()
        ),
    )


def with_view(sql: str, view: ViewDefinition) -> str:
    """`sql` with every reference to `view` replaced by the view's query, as a derived table
    under the reference's alias (or the view's name), so that qualified columns still resolve."""
    body = view_query(view)
    edits = []
    for table in input_references(parse_query(sql)):
        if normalize_table_name(table) != view.name:
            continue
        start, end = _span(table)
        replacement = f"({body})"
        if not table.alias:
            replacement += f" AS {exp.to_identifier(table.name).sql(DIALECT)}"
        edits.append((start, end, replacement))
    for start, end, replacement in sorted(edits, reverse=True):
        sql = sql[:start] + replacement + sql[end:]
    return sql


def view_query(view: ViewDefinition) -> str:
    """The view's query as it reads in the view's own schema: its unqualified table names
    qualified with that schema, and its output limited to the view's columns (a view over
    `select *` keeps the columns it was created with)."""
    text = view.text.strip().rstrip(";")
    edits = []
    for table in input_references(parse_query(text)):
        if table.args.get("db") or not view.namespace:
            continue
        start, _ = _span(table)
        edits.append((start, f"{exp.to_identifier(view.namespace, quoted=True).sql(DIALECT)}."))
    for start, prefix in sorted(edits, reverse=True):
        text = text[:start] + prefix + text[start:]
    if not view.columns:
        return text
    columns = ", ".join(exp.to_identifier(c, quoted=True).sql(DIALECT) for c in view.columns)
    return f"SELECT {columns} FROM ({text}) AS _streamsql_view"


def _span(table: exp.Table) -> Tuple[int, int]:
    """Where a table reference's name (not its alias) stands in the text it was parsed from."""
    parts = table.parts
    start, end = parts[0].meta.get("start"), parts[-1].meta.get("end")
    if start is None or end is None:
        raise StepError(f"cannot locate `{table.sql(DIALECT)}` in a query to put a view in")
    return int(start), int(end) + 1
