{#
  dbt run-operation streamsql_flush --args '{model: hourly_spend}'
  (a versioned model: --args '{model: orders, v: 2}' or '{model: orders_v2}', named_model.sql)
  Releases every change the model's WATERMARK holds (a quiet source must not stall the output),
  as one step that goes through LATENESS like any other.
#}
{% macro streamsql_flush(model, v=none) %}
  {%- set node = streamsql_named_model('streamsql_flush', model, v) -%}
  {%- if node.config.materialized != 'incremental_view' -%}
    {%- do exceptions.raise_compiler_error("streamsql_flush: model '" ~ model ~ "' is materialized as " ~ node.config.materialized ~ ", not incremental_view.") -%}
  {%- endif -%}
  {%- set relation = api.Relation.create(schema=node.schema, identifier=node.alias, type='table') -%}
  {%- do adapter.streamsql_flush(relation, node.config, streamsql_side_table_macros()) -%}
{% endmacro %}
