{#
  The step records of an incremental view, newest first, from its last completed step on: the
  `streamsql` object each step commits in the userMetadata of its commit to the model's table
  (docs/tables.md, "The step record"), each with `model_version`: the model's version to read
  for what the step left, its newest before the next step's first commit. Only the records of
  the table's current incarnation (since its last creation or full refresh), at most `count` of
  them, down to step 0 (the table's creation). A step whose side-table writes have not all
  landed yet (it is running, or a crash stopped it after its model commit) is not completed:
  its record is left out, and the list starts at the step before it. Read by the adapter
  (`streamsql_completed_steps`), from the Delta log.

  Used by the generic tests (matches_recompute, late_rows_at_most, waterline_within): the
  model's own history says which step last completed, which input versions each step read, and
  which version of the model holds what it committed.
#}
{% macro streamsql_step_records(relation, count) %}
  {{ return(adapter.streamsql_completed_steps(relation, count)) }}
{% endmacro %}


{#- The graph node of the model whose table is `relation` (none when there is not exactly one). -#}
{% macro streamsql_model_node(relation) %}
  {%- set found = [] -%}
  {%- for node in graph.nodes.values() -%}
    {%- if node.resource_type == 'model' and (node.alias or node.name) | lower == relation.identifier | lower
          and node.schema | lower == relation.schema | lower -%}
      {%- do found.append(node) -%}
    {%- endif -%}
  {%- endfor -%}
  {{ return(found[0] if found | length == 1 else none) }}
{% endmacro %}


{#- `name`'s key in `mapping`, matched case-insensitively (none when it has none). -#}
{% macro streamsql_key_like(mapping, name) %}
  {%- for key in (mapping or {}).keys() -%}
    {%- if key | lower == name | lower -%}{{ return(key) }}{%- endif -%}
  {%- endfor -%}
  {{ return(none) }}
{% endmacro %}
