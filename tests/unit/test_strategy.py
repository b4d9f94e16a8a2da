"""Which plan a step runs: the `strategy` config, and a step's choice to recompute."""

import pytest

from dbt.adapters.streamsql.execution.commit.record import StepRecord
from dbt.adapters.streamsql.execution.explain import explain_model
from dbt.adapters.streamsql.execution.pipeline import step_cost
from dbt.adapters.streamsql.execution.pipeline.step import ModelSettings, StepError, run_step
from dbt.adapters.streamsql.execution.shared import configs
from tests.unit.fake_sql_session import FakeSqlSession

SRC = [("id", "bigint"), ("k", "bigint"), ("v", "bigint")]
LINEAR = "select id, k, v * 10 as v10 from demo.src where k is not null"
AGGREGATE = "select k, count(*) as n from demo.src group by k"
MIB = 2**20


def session_with_source(size_bytes: int) -> FakeSqlSession:
    session = FakeSqlSession()
    session.create_source("demo.src", SRC)
    session.tables["demo.src"].size_bytes = size_bytes
    return session


def reads_the_model_to_diff(statements) -> bool:
    return any("FROM `demo`.`m` VERSION AS OF" in s for s in statements)


def writes_whole(statements) -> bool:
    """The step wrote the query's rows as the model's whole table (rewrite_on_recompute)."""
    return any(s.startswith("INSERT OVERWRITE `demo`.`m` ") for s in statements)


def test_strategy_recompute_recomputes_every_step_and_keeps_no_state():
    session = session_with_source(MIB)
    settings = ModelSettings(name="m", schema="demo", identifier="m", strategy="recompute")
    result = run_step(session, settings, AGGREGATE)
    assert result.plan == "recompute"
    assert result.reason == "recompute: strategy: recompute (the model's config)"
    assert "demo.m__streamsql_state" not in session.tables
    session.append_to("demo.src")
    start = len(session.statements)
    run_step(session, settings, AGGREGATE)
    assert reads_the_model_to_diff(session.statements[start:])


def test_an_unknown_strategy_names_the_choices():
    with pytest.raises(
        StepError, match="config strategy = 'fast' is not one of auto, incremental, recompute"
    ):
        configs.model_settings("m", "demo", {"strategy": "fast"}, full_refresh=False)


@pytest.mark.parametrize(
    "strategy, input_mib, change_mib, recomputed",
    [
        ("auto", 100, 150, True),  # the inputs changed by more than half of what they hold
        ("auto", 200, 20, False),  # a small change: incremental
        ("auto", 10, 10, False),  # small inputs: a step costs its fixed cost either way
        ("incremental", 200, 150, False),  # the config says never
    ],
)
def test_a_stateless_step_recomputes_when_its_change_is_as_large_as_its_inputs(
    strategy, input_mib, change_mib, recomputed
):
    session = session_with_source(input_mib * MIB)
    settings = ModelSettings(name="m", schema="demo", identifier="m", strategy=strategy)
    run_step(session, settings, LINEAR)
    session.append_to("demo.src", size_bytes=change_mib * MIB)
    # explain decides the next step's plan by the function the step calls (plan_choice.decide)
    explained = " ".join(explain_model(session, settings, LINEAR).split())
    start = len(session.statements)
    result = run_step(session, settings, LINEAR)
    assert result.plan == "linear"  # the model's plan; the step's choice is a note
    # a recompute writes the query's rows as the whole table (rewrite_on_recompute)
    assert not reads_the_model_to_diff(session.statements[start:])
    assert writes_whole(session.statements[start:]) == recomputed
    assert result.write == ("whole" if recomputed else "")
    notes = [note for note in result.notes if note.startswith("recomputed this step")]
    assert bool(notes) == recomputed
    switch = "it recomputes the model instead of running its linear plan (strategy: auto): "
    weighed = (
        f"its inputs changed by {change_mib:.1f} MiB, at least 50% of their "
        f"{input_mib + change_mib:.1f} MiB"
    )
    assert (switch + weighed in explained) == recomputed, explained
    if recomputed:
        assert notes[0] == f"recomputed this step: {weighed}; wrote the model whole"
        assert "it writes the query's rows as the whole table (rewrite_on_recompute)" in explained
        assert result.log_line().endswith(notes[0])
    elif strategy == "auto":
        assert (
            f"it runs the linear plan (strategy: auto): its inputs changed by {change_mib:.1f} "
            f"MiB of their {input_mib + change_mib:.1f} MiB; it would recompute at 50% of inputs "
            "of 64.0 MiB or more"
        ) in explained, explained
    else:
        assert "strategy: auto" not in explained, explained


@pytest.mark.parametrize(
    "config",
    [{"rewrite_on_recompute": False}, {"unique_key": ["id"]}, {"append_only": True}],
)
def test_a_recompute_writes_the_difference_where_the_model_needs_it(config):
    """`unique_key` and `append_only` check the change, and `rewrite_on_recompute: false` asks
    for it: those recomputes net the query's rows against the table and write the difference."""
    session = session_with_source(100 * MIB)
    settings = configs.model_settings("m", "demo", config, full_refresh=False)
    run_step(session, settings, LINEAR)
    session.append_to("demo.src", size_bytes=150 * MIB)
    explained = " ".join(explain_model(session, settings, LINEAR).split())
    start = len(session.statements)
    result = run_step(session, settings, LINEAR)
    assert result.computed == "recompute" and result.write == ""
    assert reads_the_model_to_diff(session.statements[start:])
    assert not writes_whole(session.statements[start:])
    assert not any(note.endswith("wrote the model whole") for note in result.notes)
    assert "it applies the difference to the model's table" in explained, explained


def test_a_plan_with_state_keeps_its_plan_whatever_the_change():
    session = session_with_source(200 * MIB)
    settings = ModelSettings(name="m", schema="demo", identifier="m")
    run_step(session, settings, AGGREGATE)
    session.append_to("demo.src", size_bytes=500 * MIB)
    result = run_step(session, settings, AGGREGATE)
    assert result.plan == "aggregate" and not result.notes


def test_explain_shows_the_plan_and_key_a_step_runs_with():
    """streamsql_explain decides the plan where the step does (plan_choice.model_plan): it
    once showed the planner's plan whatever `strategy` said, and ignored unique_key."""
    recompute = configs.model_settings("m", "demo", {"strategy": "recompute"}, False)
    text = explain_model(session_with_source(MIB), recompute, AGGREGATE)
    assert "Plan: recompute" in text
    assert "strategy: recompute (the model's config)" in text
    assert "remove the config strategy: recompute" in text
    keyed = configs.model_settings("m", "demo", {"unique_key": "id"}, False)
    text = " ".join(explain_model(session_with_source(MIB), keyed, LINEAR).split())
    assert "Merge key: (id), the model's unique_key: a row whose key stays is updated" in text


# -- auto by cost: the model's recorded step costs (step_cost.py) -------------------------------


def took(session: FakeSqlSession, seconds: float, table: str = "demo.m") -> None:
    """The model's last step took `seconds`: its model commit's time, `seconds` after the
    step's start (the record the commit carries says when it started)."""
    commit = [c for c in session.tables[table].history if c.get("userMetadata")][-1]
    started = StepRecord.from_json(commit["userMetadata"]).started_at
    commit["timestamp"] = int((started + seconds) * 1000)


def model_record(session: FakeSqlSession) -> StepRecord:
    records = [StepRecord.from_json(c.get("userMetadata")) for c in session.commits("demo.m")]
    return [r for r in records if r is not None][-1]


def writes_state(statements) -> bool:
    return any(s.startswith("INSERT INTO `demo`.`m__streamsql_state`") for s in statements)


def test_step_costs_are_sampled_from_the_step_before():
    first = StepRecord(step=1, run_id="r", sql_fingerprint="f", started_at=100.0)
    first.computed, first.input_bytes = "aggregate", 2_000
    # a step that read its inputs in full is a rebuild's cost, with the bytes it read
    assert step_cost.costs_after(first, 103.5) == {"rebuild": [3.5, 2000.0]}
    assert step_cost.costs_after(first, None) == {}  # the commit's time unknown: no sample
    later = first.next("r2", {})
    later.started_at, later.computed, later.costs = 200.0, "aggregate", {"rebuild": [3.5, 2e3]}
    costs = step_cost.costs_after(later, 201.25)
    assert costs == {"rebuild": [3.5, 2000.0], "incremental": [1.25]}
    later.costs = {"incremental": [1.0, 2.0, 3.0, 4.0, 5.0]}
    assert step_cost.costs_after(later, 206.0)["incremental"] == [2.0, 3.0, 4.0, 5.0, 6.0]
    stateful = StepRecord(step=1, run_id="r", sql_fingerprint="f", started_at=100.0)
    stateful.computed, stateful.input_bytes, stateful.state_tables = "aggregate", 2_000, ["state"]
    # it built its state tables too: no rebuild's price, a bound on one (and on a state rebuild)
    assert step_cost.costs_after(stateful, 103.5) == {"first": [3.5, 2000.0]}
    assert step_cost.estimates({"first": [3.5, 2000.0]}, 4000).first == 7.0
    later.recovered = ["an input was vacuumed"]  # a recovery recomputes: a rebuild's cost
    assert "rebuild" not in step_cost.costs_after(later, 204.0)  # (without its bytes: none)
    later.input_bytes = 2_000
    assert step_cost.costs_after(later, 204.0)["rebuild"] == [4.0, 2000.0]
    # rebuild samples are [seconds, bytes] pairs, the last KEPT_SAMPLES of them
    later.costs = {"rebuild": [float(n) for n in range(1, 11)]}  # (1, 2) .. (9, 10)
    assert step_cost.costs_after(later, 204.0)["rebuild"] == [3.0, 4.0, 5.0, 6.0, 7.0, 8.0] + [
        9.0,
        10.0,
        4.0,
        2000.0,
    ]
    flush = later.next("r3", {})
    flush.flush, flush.started_at, flush.computed = True, 300.0, "linear"
    assert step_cost.costs_after(flush, 301.0) == flush.costs
    # a rebuild scales with the inputs' bytes; an incremental step is the median of its samples
    estimated = step_cost.estimates({"rebuild": [3.0, 1000.0], "incremental": [9, 1, 2]}, 3000)
    assert (estimated.incremental, estimated.rebuild) == (2, 9.0)
    # ... and a rebuild is the median of its scaled samples: one slow step does not swing it
    slow = step_cost.estimates({"rebuild": [1.0, 1000.0, 30.0, 1000.0, 1.5, 1500.0]}, 3000)
    assert slow.rebuild == 3.0
    assert step_cost.estimates({}, 3000) == step_cost.Estimates(None, None)


def test_auto_recomputes_a_model_with_state_while_that_is_cheaper_then_rebuilds_its_state():
    session = session_with_source(100 * MIB)
    # a recompute writes the difference: it costs more than a rebuild, so no step explores
    settings = ModelSettings(name="m", schema="demo", identifier="m", rewrite_on_recompute=False)
    run_step(session, settings, AGGREGATE)
    took(session, 2.0)  # a first step builds the state tables too: no rebuild's price
    for _ in range(2):
        session.append_to("demo.src", size_bytes=MIB)
        # no rebuild priced: a plan with state does not recompute to learn the price (coming
        # back, it rebuilds its state)
        assert run_step(session, settings, AGGREGATE).computed == "aggregate"
        took(session, 5.0)  # an incremental step
    # the input is created again: the step recovers, recomputing the model: a rebuild's price
    session.create_source("demo.src", SRC)
    session.tables["demo.src"].table_id = "table-2"
    session.append_to("demo.src")
    session.tables["demo.src"].size_bytes = 100 * MIB
    recovered = run_step(session, settings, AGGREGATE)
    assert recovered.computed == "recompute" and "recovered (demo.src" in recovered.notes[-1]
    took(session, 2.0)
    session.append_to("demo.src", size_bytes=2 * MIB)
    explained = " ".join(explain_model(session, settings, AGGREGATE).split())
    start = len(session.statements)
    fifth = run_step(session, settings, AGGREGATE)
    # estimated: the recompute's 2.0 s x 102/100 MiB = 2.04 s, under 80% of the incremental 5 s
    because = (
        "recomputing is estimated at 2.04 s against 5.00 s for an incremental step (from "
        "the costs of its recorded steps)"
    )
    assert fifth.plan == "aggregate" and fifth.computed == "recompute"
    assert f"recomputed this step: {because}" in fifth.notes
    switch = "it recomputes the model instead of running its aggregate plan (strategy: auto): "
    assert switch + because in explained, explained
    assert reads_the_model_to_diff(session.statements[start:])
    assert not writes_state(session.statements[start:])  # its state falls behind
    assert model_record(session).state_behind_since == 5
    took(session, 6.0)  # the recompute cost more than an incremental step, once: it stays
    session.append_to("demo.src", size_bytes=MIB)
    sixth = run_step(session, settings, AGGREGATE)
    # the median of the rebuild samples (2.0 and 6.0 s, scaled) is still the cheaper
    assert sixth.computed == "recompute"
    assert "estimated at 4.06 s against 5.00 s" in sixth.notes[0], sixth.notes
    took(session, 9.0)  # and again: back to the incremental plan
    session.append_to("demo.src", size_bytes=MIB)
    start = len(session.statements)
    seventh = run_step(session, settings, AGGREGATE)
    assert seventh.computed == "recompute"  # a recovery: the state tables are rebuilt first
    assert any(
        note.startswith(
            "recovered (its state tables lack the steps since step 5, which "
            "recomputed the model (strategy: auto)"
        )
        for note in seventh.notes
    ), seventh.notes
    assert writes_state(session.statements[start:])
    assert model_record(session).state_behind_since is None
    took(session, 9.0)
    session.append_to("demo.src", size_bytes=MIB)
    eighth = run_step(session, settings, AGGREGATE)
    # the rebuild samples' median (6 s, the recovery's 9 s among them) is dearer: the plan again
    assert eighth.computed == "aggregate" and not eighth.notes, eighth.notes


@pytest.mark.parametrize("first_seconds, explores", [(9.0, True), (40.0, False)])
def test_a_plan_with_state_whose_recompute_writes_whole_explores_where_a_wrong_guess_is_cheap(
    first_seconds, explores
):
    """Writing the query's rows whole, a recompute costs about a rebuild: a plan with state
    recomputes once to price it, unless its first step (about what the recompute and the
    rebuild of its state coming back each cost) says a wrong guess would cost over
    EXPLORE_RISK_STEPS incremental steps; it stays while that is the cheaper."""
    session = session_with_source(100 * MIB)
    settings = ModelSettings(name="m", schema="demo", identifier="m")
    run_step(session, settings, AGGREGATE)
    # a first step builds the state tables too: no rebuild's price, but a bound on one
    took(session, first_seconds)
    session.append_to("demo.src", size_bytes=MIB)
    assert run_step(session, settings, AGGREGATE).computed == "aggregate"
    took(session, 5.0)  # an incremental step
    session.append_to("demo.src", size_bytes=MIB)
    start = len(session.statements)
    third = run_step(session, settings, AGGREGATE)
    if not explores:
        assert third.computed == "aggregate" and not third.notes, third.notes
        return
    assert third.computed == "recompute" and third.write == "whole"
    assert writes_whole(session.statements[start:])
    assert (
        "recomputed this step: no step has recomputed the model yet and an incremental step is "
        "estimated at 5.00 s, so this one recomputes, to learn what that costs; wrote the model "
        "whole"
    ) in third.notes, third.notes
    assert model_record(session).state_behind_since == 3
    took(session, 1.0)  # cheaper: it stays
    session.append_to("demo.src", size_bytes=MIB)
    fourth = run_step(session, settings, AGGREGATE)
    assert fourth.computed == "recompute" and fourth.write == "whole", fourth.notes
    assert "recomputed this step: recomputing is estimated at 1.01 s" in fourth.notes[0]


def test_a_plan_without_state_recomputes_once_to_price_a_rebuild():
    """A model whose steps kept no price of a rebuild (its first step's time unknown, as for a
    model built before steps recorded their costs) recomputes one step to learn it."""
    session = session_with_source(100 * MIB)
    settings = ModelSettings(name="m", schema="demo", identifier="m")
    run_step(session, settings, LINEAR)  # (its commit's time unknown: no sample)
    session.append_to("demo.src", size_bytes=MIB)
    assert run_step(session, settings, LINEAR).computed == "linear"
    took(session, 5.0)
    session.append_to("demo.src", size_bytes=MIB)
    third = run_step(session, settings, LINEAR)
    assert third.computed == "recompute"
    assert (
        "recomputed this step: no step has recomputed the model yet and an incremental step is "
        "estimated at 5.00 s, so this one recomputes, to learn what that costs; wrote the model "
        "whole"
    ) in third.notes, third.notes
    took(session, 9.0)  # dearer: back to the plan, which has no state to rebuild
    session.append_to("demo.src", size_bytes=MIB)
    fourth = run_step(session, settings, LINEAR)
    assert fourth.computed == "linear" and not fourth.notes, fourth.notes


@pytest.mark.parametrize("input_mib, strategy", [(1, "auto"), (100, "incremental")])
def test_auto_weighs_costs_only_over_large_inputs_and_incremental_never(input_mib, strategy):
    session = session_with_source(input_mib * MIB)
    settings = ModelSettings(name="m", schema="demo", identifier="m", strategy=strategy)
    run_step(session, settings, AGGREGATE)
    took(session, 1.0)
    session.append_to("demo.src", size_bytes=MIB)
    run_step(session, settings, AGGREGATE)
    took(session, 9.0)
    session.append_to("demo.src", size_bytes=MIB)
    assert run_step(session, settings, AGGREGATE).computed == "aggregate"


def test_a_recompute_plan_carries_the_query_rows_it_may_write_whole():
    from dbt.adapters.streamsql.planning.plan import Column, InputTable
    from dbt.adapters.streamsql.planning.planner import recompute_plan

    inputs = [InputTable("demo.src", [Column(n, t) for n, t in SRC])]
    columns = [Column("k", "bigint"), Column("n", "bigint")]
    plan = recompute_plan(AGGREGATE, inputs, columns, "a test")
    assert plan.rows_sql is not None and "_streamsql_weight" not in plan.rows_sql
    assert plan.rows_sql == (
        "SELECT k, n\nFROM (\nselect k, count(*) as n from __streamsql_new_0__ AS src group by k"
        "\n) AS _streamsql_model(k, n)"
    )
    # a recovery's change is not the query minus the table: nothing to write whole
    assert recompute_plan(AGGREGATE, inputs, columns, "a test", change_sql="x").rows_sql is None
