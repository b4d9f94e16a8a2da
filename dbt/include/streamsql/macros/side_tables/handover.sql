{#
  The side-table macros the adapter calls during a step (create.sql, append.sql), handed over by
  the materialization and by streamsql_flush: called from Python, they render in the caller's
  context, so a project's overrides apply and see the model's `config`.
#}
{% macro streamsql_side_table_macros() -%}
  {{ return({
      'streamsql_create_late_table': streamsql_create_late_table,
      'streamsql_create_waterline_table': streamsql_create_waterline_table,
      'streamsql_create_pending_table': streamsql_create_pending_table,
      'streamsql_append_late_rows': streamsql_append_late_rows,
      'streamsql_append_waterline_rows': streamsql_append_waterline_rows,
      'streamsql_merge_pending_rows': streamsql_merge_pending_rows,
      'streamsql_mark_readmitted_rows': streamsql_mark_readmitted_rows,
  }) }}
{%- endmacro %}
