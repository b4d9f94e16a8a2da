"""Which plan a step runs: the `strategy` config, and a step's choice to recompute."""

import pytest

from dbt.adapters.streamsql.execution.explain import explain_model
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
    assert reads_the_model_to_diff(session.statements[start:]) == recomputed
    notes = [note for note in result.notes if note.startswith("recomputed this step")]
    assert bool(notes) == recomputed
    switch = "it recomputes the model instead of running its linear plan (strategy: auto): "
    weighed = (
        f"its inputs changed by {change_mib:.1f} MiB, at least 50% of their "
        f"{input_mib + change_mib:.1f} MiB"
    )
    assert (switch + weighed in explained) == recomputed, explained
    if recomputed:
        assert notes[0] == f"recomputed this step: {weighed}"
        assert result.log_line().endswith(notes[0])
    elif strategy == "auto":
        assert (
            f"it runs the linear plan (strategy: auto): its inputs changed by {change_mib:.1f} "
            f"MiB of their {input_mib + change_mib:.1f} MiB; it would recompute at 50% of inputs "
            "of 64.0 MiB or more"
        ) in explained, explained
    else:
        assert "strategy: auto" not in explained, explained


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
