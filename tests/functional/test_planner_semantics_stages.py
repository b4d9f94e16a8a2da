"""The delta rules of plans with stages (aggregates below the top of the query, planning/stages.py)
checked on real Spark, as test_planner_semantics.py checks the others and with its helpers.

A step is taken as the executor takes it (execution/pipeline/change.py `stage_change` and
`aggregate_change`, aggregate_state.py): each stage, innermost first, computes its group delta,
the old and new state of the changed groups (the state read within the changed groups' key
ranges; MIN/MAX recomputed from the inputs unless no deletion can have removed one) and the
netted change of its output; its old result (its output over the whole state before), new result
(over the state after) and that change are bound as the placeholders of its position, like an
input's. Then the model's change: a linear plan's over inputs and stages, or the top aggregate's
through its own state. A stage's state before a step is what a first step over the old inputs
left (the executor's bootstrap). Temp views bind every placeholder; the statements that combine
state are the executor's own (engine/statements.py).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Optional

import pytest

from dbt.adapters.streamsql.execution.commit.aggregate_state import group_columns
from dbt.adapters.streamsql.execution.commit.bounds import range_measures, ranges_from
from dbt.adapters.streamsql.execution.engine import statements
from dbt.adapters.streamsql.planning.plan import (
    COUNT,
    GROUP_ALIAS,
    GROUP_DELTA,
    GROUPS,
    STATE,
    WEIGHT,
    Column,
    delta_input,
    new_input,
    old_input,
)
from dbt.adapters.streamsql.planning.planner import plan_step
from tests.functional.test_planner_semantics import (
    INPUTS,
    bag,
    bind_rows_below_the_cut,
    check_change,
    hashable,
    materialize,
    model_over,
    output_columns,
    register_inputs,
    scenarios,
    state_schema_of,
    with_bounds,
)

# (id, query, the plan's strategy, what its reason says, how many stages), one per kind of stage
STAGED = [
    (  # a derived table joined; a join below its aggregate (the stage's own key bounds and
        # later form), its MAX recomputed from the inputs after a deletion
        "join_of_aggregate",
        "select t.id, a.c, a.mx from demo.t join (select u.k, count(*) as c, max(t2.n) as mx "
        "from demo.u join demo.t t2 on u.k = t2.k group by u.k) a on t.k = a.k",
        "linear",
        "inner join; over 1 stage (group by (count(*), max)",
        1,
    ),
    (  # below the top aggregate: the top's state reads the stage's change
        "aggregate_of_aggregate",
        "select c, count(*) as groups, max(mv) as top, sum(c) as sc from (select k, count(*) "
        "as c, max(v) as mv from demo.t group by k) a group by c",
        "aggregate",
        "; over 1 stage (group by (count(*), max)",
        1,
    ),
    (  # scalar subqueries: a one-row stage CROSS JOINed (a change of its value re-evaluates
        # every row), a correlated one grouped and LEFT JOINed (COUNT reads 0 where none match)
        "scalar_subqueries",
        "select id, (select count(*) from demo.u where u.k = t.k and u.w > 1) as c from demo.t "
        "where v > (select avg(v) from demo.t)",
        "linear",
        "scalar subquery; over 2 stages (group by (count(*)); global aggregate (avg))",
        2,
    ),
    (  # INTERSECT ALL, EXCEPT ALL: stages of each side's counts, copies emitted by a LATERAL
        # VIEW; an aggregate in a UNION ALL branch (lifted as a branch reading the stage)
        "intersect_all_except_all_union_all",
        "select k, cast(null as string) as s from (select k from demo.t intersect all "
        "select k from demo.u) a union all select k, s from (select k, s from demo.t where n > 0 "
        "except all select k, s from demo.t where v > 0) b "
        "union all select k, cast(count(*) as string) as s from demo.u group by k",
        "linear",
        "except all, intersect all; over 3 stages (intersect all counts (count); except all "
        "counts (count); group by (count(*)))",
        3,
    ),
    (  # the nested INTERSECT (distinct) a stage below the top's EXCEPT
        "except_of_intersect",
        "select k, s from demo.t except (select k, s from demo.t where n > 0 intersect "
        "select k, s from demo.t where v > 0)",
        "aggregate",
        "except (count); over 1 stage (intersect (count))",
        1,
    ),
    (  # a stage per grouping set; HAVING and grouping_id() in each
        "rollup",
        "select k, s, count(*) as c, max(n) as mx, grouping_id() as g from demo.t "
        "group by rollup(k, s) having count(*) > 1",
        "linear",
        "rollup; over 3 stages",
        3,
    ),
    (  # the aggregate below the LIMIT a stage; the model's rows read (__streamsql_target__)
        "global_top_k_of_aggregate",
        "select k, count(*) as c, sum(v) as sv from demo.t group by k order by c desc, k limit 2",
        "linear",
        "global top-k (limit 2); over 1 stage (group by (count(*), sum))",
        1,
    ),
    (  # a window over the groups reads them all: the aggregate a stage
        "window_over_aggregate",
        "select q.k, q.s, avg(q.c) over (partition by q.s order by q.mx, q.k rows between 1 "
        "preceding and current row) as a from (select k, s, count(*) as c, max(id) as mx "
        "from demo.t group by k, s) q",
        "linear",
        "window per partition (avg); over 1 stage (group by (count(*), max)",
        1,
    ),
    (  # a CTE read twice is one stage; the second stage reads it (MAX over its change)
        "stage_over_stage",
        "with c as (select k, s, count(*) as n from demo.t group by k, s), m as (select k, "
        "max(n) as top from c group by k) select c.k, c.s, c.n from c join m on c.k <=> m.k "
        "and c.n >= m.top",
        "linear",
        "inner join; over 2 stages (group by (count(*)); group by (max)",
        2,
    ),
]


@pytest.fixture(scope="module")
def spark(small_spark):
    return small_spark


def describe(spark, select):
    """The planner's `describe` as the executor gives it (inputs.describer): DESCRIBE QUERY of a
    SELECT over the inputs' new placeholders."""
    return [Column(f.name, f.dataType.simpleString()) for f in spark.sql(select).schema.fields]


def bind(sql_text, views):
    """`sql_text` with `views` bound; other placeholders (the inputs', the stages') are the temp
    views of their own names."""
    return statements.replace_placeholders(sql_text, lambda name: views.get(name, name))


def aggregate_step(spark, label, aggregate, columns, state, first_step, inserts_only, top=False):
    """One step of an aggregate plan (aggregate_state.py `changed_groups`, `output_change`).

    `state`: the rows of its whole state before the step (None: empty, before a first step).
    Returns the views of the whole state before and of the changed groups' new state, and the
    rows of the netted change of its output (`columns`, then the weight) from the changed
    groups' old state (the `top` aggregate's on a first step from nothing: the model's table
    starts empty, even where the query's old output is a global aggregate's one row).
    """
    delta_sql = aggregate.delta_form(first_step, inserts_only)
    if first_step:  # a first step reads every input in full: its bounds are `true`
        for bound in aggregate.bounds:
            delta_sql = delta_sql.replace(bound.name, "true")
    group_delta = spark.sql(with_bounds(spark, delta_sql, aggregate.bounds))
    schema = state_schema_of(aggregate, group_delta)
    delta_view, whole, old_view = f"{label}group_delta", f"{label}whole", f"{label}groups_old"
    materialize(spark, group_delta, delta_view)
    spark.createDataFrame(state or [], schema).createOrReplaceTempView(whole)
    # the changed groups' key ranges (the part of the state read), and whether a deletion may
    # have removed a MIN or MAX (if not, the combine that does not read the inputs again)
    keys = group_columns(aggregate)
    shortcut = aggregate.recompute_check and aggregate.combine_without_recompute_sql
    check = {"recompute": aggregate.recompute_check} if shortcut else {}
    measures = range_measures(keys, GROUP_ALIAS, check, first_step)
    found = {}
    if measures:
        selected = ", ".join(f"{e} AS {n}" for n, e in measures.items())
        found = spark.sql(f"SELECT {selected} FROM {delta_view} AS {GROUP_ALIAS}").first()
        found = found.asDict()
    if state is None:  # the changed groups' state before a first step: none
        spark.createDataFrame([], schema).createOrReplaceTempView(old_view)
    else:
        ranges = ranges_from(keys, GROUP_ALIAS, found, first_step)
        read = whole
        if ranges:
            read = f"(SELECT * FROM {whole} AS {GROUP_ALIAS} WHERE {' AND '.join(ranges)})"
        materialize(spark, spark.sql(statements.previous_groups(read, delta_view, keys)), old_view)
    combine = aggregate.combine_sql
    if shortcut and int(found["recompute"]) == 0:
        combine = aggregate.combine_without_recompute_sql
    combined = spark.sql(bind(combine, {GROUP_DELTA: delta_view, STATE: old_view}))
    assert combined.columns == [c.name for c in aggregate.state_columns]
    new_view = f"{label}groups_new"
    materialize(spark, combined, new_view)
    output_new = bind(aggregate.output_sql, {GROUPS: new_view})
    output_old = bind(aggregate.output_sql, {GROUPS: old_view})
    if top and first_step:
        output_old = f"SELECT * FROM ({output_old}) WHERE false"
    change = f"({statements.output_change(output_new, output_old, columns)})"
    net = materialize(spark, spark.sql(statements.consolidate(change, columns)), f"{label}net")
    return whole, new_view, net


def state_after(spark, aggregate, whole, new_groups, keep):
    """The whole state after the step (its live groups), if `keep`; else None."""
    after = statements.state_after(whole, new_groups, group_columns(aggregate))
    return [r for r in spark.sql(after).collect() if r[COUNT] > 0] if keep else None


def stage_change(spark, stage, state, first_step, inserts_only, keep):
    """change.py `stage_change`: the stage's placeholders bound, its old and new result read
    from its whole state before and after. Returns its state after (if `keep`) and its netted
    change (rows)."""
    aggregate, label = stage.aggregate, f"{stage.name}_"
    whole, new_groups, net = aggregate_step(
        spark, label, aggregate, stage.columns, state, first_step, inserts_only
    )
    after = statements.state_after(whole, new_groups, group_columns(aggregate))
    spark.sql(after).createOrReplaceTempView(f"{label}state_after")
    columns = statements.column_list(stage.columns)
    for placeholder, state_view in (
        (old_input(stage.position), whole),
        (new_input(stage.position), f"{label}state_after"),
    ):
        output = bind(aggregate.output_sql, {GROUPS: state_view})
        spark.sql(f"SELECT {columns} FROM ({output})").createOrReplaceTempView(placeholder)
    spark.table(f"{label}net").createOrReplaceTempView(delta_input(stage.position))
    return state_after(spark, aggregate, whole, new_groups, keep), net


@dataclasses.dataclass
class Step:
    states: list  # each aggregate's state after the step (stages, then the top's), if kept
    stage_changes: list  # each stage's netted change
    inserts_only: bool  # every change was an insert, the inputs' and the stages'
    top_change: Optional[list]  # the top aggregate's netted change (None: a linear plan)


def take_step(spark, plan, old, new, states, keep):
    """A step from `old` to `new` (`states`: each aggregate's state before, stages first; None
    before a first step): the stages, then the top aggregate's change if the plan has one."""
    first_step = states is None
    states = states or [None] * (len(plan.stages) + 1)
    register_inputs(spark, old, new)
    step = Step([], [], not any(Counter(o) - Counter(n) for o, n in zip(old, new)), None)
    for stage, state in zip(plan.stages, states):
        after, net = stage_change(spark, stage, state, first_step, step.inserts_only, keep)
        step.inserts_only = step.inserts_only and all(row[WEIGHT] > 0 for row in net)
        step.states.append(after)
        step.stage_changes.append(net)
    if plan.aggregate is not None:
        aggregate, columns = plan.aggregate, plan.output_columns
        whole, new_groups, step.top_change = aggregate_step(
            spark, "", aggregate, columns, states[-1], first_step, step.inserts_only, top=True
        )
        step.states.append(state_after(spark, aggregate, whole, new_groups, keep))
    return step


def check_step(spark, sql, plan, old, new, states):
    """The step's change applied to the model before it gives the model over `new`. `states`:
    as `take_step` has them; the step is returned, with the states after a first step."""
    first_step = states is None
    step = take_step(spark, plan, old, new, states, keep=first_step)
    if plan.kind == "linear":  # every placeholder bound: the harness's own check
        plan = bind_rows_below_the_cut(plan)  # a global top-K's: none (a step without them)
        # the form change.py `linear_change` runs; a first step's bounds `true` (bounds.py)
        form = plan.change_sql
        if not (first_step or (plan.monotonic and step.inserts_only)) and plan.later_change_sql:
            form = plan.later_change_sql
        if first_step:
            for bound in plan.bounds:
                form = form.replace(bound.name, "true")
            plan = dataclasses.replace(plan, bounds=())
        check_change(spark, sql, plan, old, new, form)
        return step
    width = len(plan.output_columns)
    # on a first step the model's table is empty (a global aggregate's one row included)
    result = Counter() if first_step else bag(model_over(spark, sql, old_input).collect())
    for row in step.top_change:
        result[tuple(hashable(v) for v in tuple(row)[:width])] += row[WEIGHT]
    assert +result == bag(model_over(spark, sql, new_input).collect()), plan.aggregate
    assert all(count >= 0 for count in result.values())
    return step


@pytest.mark.parametrize(
    "sql, strategy, reason, stages", [case[1:] for case in STAGED], ids=[c[0] for c in STAGED]
)
def test_plans_with_stages_are_exact(spark, sql, strategy, reason, stages):
    columns = output_columns(spark, sql)  # (the inputs bound, empty, for `describe` too)
    plan = plan_step(sql, INPUTS, columns, lambda select: describe(spark, select))
    assert plan.kind == strategy and reason in plan.reason, plan.reason
    assert [s.position for s in plan.stages] == list(range(len(INPUTS), len(INPUTS) + stages))
    assert all(c.data_type for s in plan.stages for c in s.columns), plan.stages
    # A first step over the old inputs, then a random change from the state it left (not the
    # harness's third scenario, everything deleted: CI time). Seed 7: every stage's change in
    # the second step both inserts and removes rows.
    (old, new), (nothing, first), _ = scenarios(7)
    assert nothing == ([], []) and first == old
    states = check_step(spark, sql, plan, nothing, old, None).states
    changes = check_step(spark, sql, plan, old, new, states).stage_changes
    for stage, change in zip(plan.stages, changes):
        signs = {row[WEIGHT] > 0 for row in change}
        assert signs == {True, False}, f"{stage.name}: the data leaves its change one-sided"
