"""Planning: a model's SQL and input schemas in, the Spark SQL of one step (`StepPlan`) out.

Pure Python over sqlglot ASTs; no Spark, no dbt. Entry point: `planner.plan_step`.
"""
