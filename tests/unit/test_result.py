"""dbt's result line shows a short status; the step line keeps the whole story."""

from __future__ import annotations

from dbt.adapters.streamsql.execution.shared.result import StepResult


def result(**fields):
    base = dict(model="m", step=3, plan="linear", reason="fast path: projection")
    return StepResult(**{**base, **fields})


def test_the_status_is_the_rows_then_what_else_happened():
    assert result(inserted=6, deleted=6).status() == "+6 -6"
    assert result(inserted=1, late=2, held=4).status() == "+1 -0, 2 late, 4 held"
    assert result(skipped=True).status() == "unchanged"
    assert result(computed="recompute").status() == "+0 -0, recomputed"
    # a model whose config is strategy: recompute recomputes every step: nothing to point out
    assert result(plan="recompute", computed="recompute").status() == "+0 -0"
    recovered = result(computed="recompute", notes=["recovered (demo.src was vacuumed)"])
    assert recovered.status() == "+0 -0, recovered"
    assert result(plan="flush", inserted=3).status() == "+3 -0, flushed"


def test_the_step_line_still_says_everything():
    line = result(inserted=1, deleted=2, changes_read=3, seconds=1.25).log_line()
    assert line == (
        "m: step 3: read 3 changes, applied 3 (+1 -2), late 0, held 0, waterline none; "
        "linear (fast path: projection); 1.2 s"
    )
