"""Running a model's step: the executor.

Its rooms are packages in layers, bottom first; a module imports only its own layer and those
below it (tests/unit/test_architecture.py, LAYERS; docs/architecture.md draws them):

- engine/     the SQL session, the Delta log, statement text, the side tables' macros, tracing:
              all access to Spark
- shared/     the data types every layer above passes around: the model's settings and configs,
              the inputs as read, what a step writes, its result, errors (and context.py,
              step_state.py and commit/record.py, to move there)
- event_time/ LATENESS, WATERMARK and emit_final: which rows are late, held or released
- commit/     the model's tables and aggregate state, the step record, the writes in their
              exactly-once order
- recovery/   schema change, lost history and retention: what a step does when the past is gone
- pipeline/   the phases of a step: the inputs, the plan's decision, the change, the keys

At the top: the entry points, pipeline/step.py's `run_step` (dbt's step) and explain.py
(`streamsql_explain`, with plan_advice.py).
"""
