{#
  The statements that write a step's rows to the side tables. The adapter decides what a step
  writes (which rows, computed as a query, and when: after the model's commit, under the step
  record and Delta's idempotent-write id); these macros say how that query becomes a write.
  Each dispatches like the DDL macros (create.sql) and returns one statement:

    append_late_rows(relation, columns, rows)       LATENESS: the step's late changes into __late
    append_waterline_rows(relation, columns, rows)  LATENESS: the step's waterlines into __waterline
    merge_pending_rows(relation, columns, changes, step)
        WATERMARK: one MERGE by id into __pending that marks the held changes released in `step`
        and adds the step's own changes that are held
    mark_readmitted_rows(relation, condition, step)
        streamsql_readmit: marks the rows of __late that meet `condition` as readmitted by `step`

  `rows` is a query (a SELECT, or VALUES) giving the new rows with the table's `columns`, in
  order. `changes` is a query giving, for `merge_pending_rows`, the model's `columns`, then
  `_streamsql_weight`, `_streamsql_held_step`, `_streamsql_held_id` and `_streamsql_release`
  (whether the step releases that change), one row per change the step releases or holds.
#}

{% macro streamsql_append_late_rows(relation, columns, rows) -%}
  {{ return(adapter.dispatch('append_late_rows', 'dbt')(relation, columns, rows)) }}
{%- endmacro %}

{% macro default__append_late_rows(relation, columns, rows) -%}
  INSERT INTO {{ relation }} ({{ streamsql_column_list(columns) }}) {{ rows }}
{%- endmacro %}


{% macro streamsql_append_waterline_rows(relation, columns, rows) -%}
  {{ return(adapter.dispatch('append_waterline_rows', 'dbt')(relation, columns, rows)) }}
{%- endmacro %}

{% macro default__append_waterline_rows(relation, columns, rows) -%}
  INSERT INTO {{ relation }} {{ rows }}
{%- endmacro %}


{% macro streamsql_merge_pending_rows(relation, columns, changes, step) -%}
  {{ return(adapter.dispatch('merge_pending_rows', 'dbt')(relation, columns, changes, step)) }}
{%- endmacro %}

{% macro default__merge_pending_rows(relation, columns, changes, step) -%}
  {%- set bookkeeping = '_streamsql_weight, _streamsql_held_step, _streamsql_released_step, _streamsql_held_id' -%}
  MERGE INTO {{ relation }} AS t USING ({{ changes }}) AS s
  {{- ' ' }}ON t._streamsql_held_id = s._streamsql_held_id
  {{- ' ' }}WHEN MATCHED AND s._streamsql_release THEN UPDATE SET _streamsql_released_step = {{ step }}
  {{- ' ' }}WHEN NOT MATCHED AND NOT s._streamsql_release THEN INSERT ({{ streamsql_column_list(columns) }}, {{ bookkeeping }})
  {{- ' ' }}VALUES ({{ streamsql_column_list(columns, 's.') }}, s._streamsql_weight, s._streamsql_held_step, CAST(NULL AS BIGINT), s._streamsql_held_id)
{%- endmacro %}


{% macro streamsql_mark_readmitted_rows(relation, condition, step) -%}
  {{ return(adapter.dispatch('mark_readmitted_rows', 'dbt')(relation, condition, step)) }}
{%- endmacro %}

{% macro default__mark_readmitted_rows(relation, condition, step) -%}
  UPDATE {{ relation }} SET _streamsql_readmitted_step = {{ step }} WHERE {{ condition }}
{%- endmacro %}


{# `a`, `b`, ... : the columns' names, quoted, each after `prefix` (a table alias and a dot). #}
{% macro streamsql_column_list(columns, prefix='') -%}
  {%- for column in columns -%}
    {{ prefix }}`{{ column.name | replace('`', '``') }}`{{ ', ' if not loop.last }}
  {%- endfor -%}
{%- endmacro %}
