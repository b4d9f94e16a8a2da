{#
  dbt run-operation streamsql_flush --args '{model: hourly_spend}'
  Releases every change the model's WATERMARK holds (a quiet source must not stall the output),
  as one step that goes through LATENESS like any other.
#}
{% macro streamsql_flush(model) %}
  {%- set matches = [] -%}
  {%- for node in graph.nodes.values() -%}
    {%- if node.resource_type == 'model' and node.name == model -%}
      {%- do matches.append(node) -%}
    {%- endif -%}
  {%- endfor -%}
  {%- if matches | length != 1 -%}
    {%- do exceptions.raise_compiler_error("streamsql_flush: no model named '" ~ model ~ "' in this project. Pass --args '{model: <model name>}'.") -%}
  {%- endif -%}
  {%- set node = matches[0] -%}
  {%- if node.config.materialized != 'incremental_view' -%}
    {%- do exceptions.raise_compiler_error("streamsql_flush: model '" ~ model ~ "' is materialized as " ~ node.config.materialized ~ ", not incremental_view.") -%}
  {%- endif -%}
  {%- set relation = api.Relation.create(schema=node.schema, identifier=node.alias, type='table') -%}
  {%- do adapter.streamsql_flush(relation, node.config, streamsql_side_table_macros()) -%}
{% endmacro %}
