{#
  The step records of an incremental view, newest first: the `streamsql` object each step commits
  in the userMetadata of its commit to the model's table (docs/tables.md, "The step record"). Only
  the records of the table's current incarnation (since its last creation or full refresh), at
  most `count` of them, down to step 0 (the table's creation). Read with DESCRIBE HISTORY, a page
  first and the whole history only when the page holds fewer than `count` records.

  Used by the operational tests (late_rows_at_most, waterline_within): the model's own history
  says which step last completed, and which input versions each step read.
#}
{% macro streamsql_step_records(relation, count) %}
  {%- set creating = ['CREATE TABLE', 'CREATE OR REPLACE TABLE', 'REPLACE TABLE',
                      'CREATE TABLE AS SELECT', 'CREATE OR REPLACE TABLE AS SELECT',
                      'REPLACE TABLE AS SELECT'] -%}
  {%- set found = {'records': []} -%}
  {%- for limit in [count + 10, none] -%}
    {%- set records = [] -%}
    {%- set seen = {'ended': false} -%}
    {%- set history = run_query("describe history " ~ relation ~ (" limit " ~ limit if limit else "")) -%}
    {%- for row in history.rows -%}
      {%- set body = (fromjson(row['userMetadata'], {}) if row['userMetadata'] else {}) -%}
      {%- set record = body.get('streamsql') if body is mapping else none -%}
      {%- if record is mapping and record.get('step') is not none -%}
        {%- if records and record.get('incarnation') != records[0].get('incarnation') -%}
          {%- do seen.update({'ended': true}) -%}{%- break -%}
        {%- endif -%}
        {%- if records | selectattr('step', 'equalto', record['step']) | list | length == 0 -%}
          {%- do records.append(record) -%}
        {%- endif -%}
        {%- if record['step'] == 0 or records | length >= count -%}
          {%- do seen.update({'ended': true}) -%}{%- break -%}
        {%- endif -%}
      {%- elif (row['operation'] or '') | upper in creating -%}
        {%- do seen.update({'ended': true}) -%}{%- break -%}
      {%- endif -%}
    {%- endfor -%}
    {%- do found.update({'records': records}) -%}
    {%- if seen.ended or history.rows | length < (limit or 0) -%}{%- break -%}{%- endif -%}
  {%- endfor -%}
  {{ return(found.records) }}
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
