"""Running a model's step: the executor.

Rooms, each a package (docs/architecture.md draws them):

- pipeline/   the step itself: read the inputs, choose the plan, compute the change, write it
- commit/     the commit protocol: the step record, transaction ids, side-table writes, roll forward
- event_time/ LATENESS, WATERMARK and emit_final: which rows are late, held or released
- recovery/   schema change, lost history and retention: what a step does when the past is gone
- engine/     the SQL session, the Delta log, statement text and tracing: all access to Spark

The top-level modules are what every room shares: the model's settings (model.py, where each
config is declared, config_kinds.py, configs.py), the step's context (context.py), its result
(result.py), errors (errors.py) and explain.py.
"""
