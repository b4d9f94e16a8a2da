{#
  dbt run-operation streamsql_lateness_report --args '{model: stg_purchases}'
  (also steps: how many of the model's last steps to count, 20 by default; v: a model version)
  Prints, per lateness column, what share of the changes of those steps a LATENESS of 0 s,
  1 s, 10 s, 1 min, ... 30 days would have accepted: each step counts how far behind the
  largest value seen before it its changes arrived (`__waterline.behind`).
#}
{% macro streamsql_lateness_report(model, steps=20, v=none) %}
  {%- set node = streamsql_named_model('streamsql_lateness_report', model, v) -%}
  {%- if node.config.materialized != 'incremental_view' -%}
    {%- do exceptions.raise_compiler_error("streamsql_lateness_report: model '" ~ model ~ "' is materialized as " ~ node.config.materialized ~ ", not incremental_view: it has no steps to count.") -%}
  {%- endif -%}
  {%- set relation = api.Relation.create(schema=node.schema, identifier=node.alias, type='table') -%}
  {%- do print(adapter.streamsql_lateness_report(relation, node.config, steps)) -%}
{% endmacro %}
