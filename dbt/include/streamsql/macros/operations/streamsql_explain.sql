{#
  dbt run-operation streamsql_explain --args '{model: hourly_spend}'
  (a versioned model: --args '{model: orders, v: 2}' or '{model: orders_v2}', named_model.sql)
  Prints what the model's next step would do, without taking it: the plan and its reason, what is
  on the fast path and what is recomputed (and how to avoid it), the model's tables, the merge
  key, the LATENESS and WATERMARK rules, and the input versions the last step read and the next
  would read.

  run-operation compiles no model, so the model's SQL is compiled here: its raw SQL rendered in
  the operation's context, where ref() and source() resolve to the same tables as in `dbt run`,
  var() and env_var() read the same values, and config() renders nothing. The adapter checks the
  result against the step record: the text says whether it is the SQL the last step ran.
#}
{% macro streamsql_explain(model, v=none) %}
  {%- set node = streamsql_named_model('streamsql_explain', model, v) -%}
  {%- if node.config.materialized != 'incremental_view' -%}
    {%- do exceptions.raise_compiler_error("streamsql_explain: model '" ~ model ~ "' is materialized as " ~ node.config.materialized ~ ", not incremental_view: it has no steps to explain.") -%}
  {%- endif -%}
  {%- for parent in node.depends_on.nodes -%}
    {%- set upstream = graph.nodes.get(parent) -%}
    {%- if upstream is not none and upstream.config.materialized == 'ephemeral' -%}
      {%- do exceptions.raise_compiler_error("streamsql_explain: model '" ~ model ~ "' reads the ephemeral model '" ~ upstream.name ~ "', which an operation cannot compile; run `dbt compile --select " ~ model ~ "` to see its SQL.") -%}
    {%- endif -%}
  {%- endfor -%}
  {%- set compiled_sql = render(node.raw_code) -%}
  {%- set relation = api.Relation.create(schema=node.schema, identifier=node.alias, type='table') -%}
  {%- do print(adapter.streamsql_explain(relation, compiled_sql, node.config)) -%}
{% endmacro %}
