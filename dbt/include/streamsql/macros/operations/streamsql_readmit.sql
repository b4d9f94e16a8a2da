{#
  dbt run-operation streamsql_readmit --args '{model: pickups, where: "_streamsql_step = 5"}'
  (also dry_run: true, to see what it would readmit and write nothing; v: a model version)
  Applies the changes of <model>__late that `where` selects (a condition over that table's
  columns; where: 'true' takes them all) to the model, as a step of their own: exactly once,
  marked in __late with that step, in the model's change feed for the models that read it, and
  moving no waterline (docs/lateness-and-watermark.md).
#}
{% macro streamsql_readmit(model, where=none, dry_run=false, v=none) %}
  {%- set node = streamsql_named_model('streamsql_readmit', model, v) -%}
  {%- if node.config.materialized != 'incremental_view' -%}
    {%- do exceptions.raise_compiler_error("streamsql_readmit: model '" ~ model ~ "' is materialized as " ~ node.config.materialized ~ ", not incremental_view: it quarantines nothing.") -%}
  {%- endif -%}
  {%- set relation = api.Relation.create(schema=node.schema, identifier=node.alias, type='table') -%}
  {%- do adapter.streamsql_readmit(relation, node.config, where, dry_run, streamsql_side_table_macros()) -%}
{% endmacro %}
