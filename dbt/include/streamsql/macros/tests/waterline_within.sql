{#
  Generic test: a LATENESS column's waterline is not further behind than `interval`. For a cron
  job that alarms when a model's event time stops moving (a quiet or stuck source, steps that no
  longer run).

    models:
      - name: stg_sensors
        data_tests:
          - waterline_within:                  # or dbt_streamsql.waterline_within
              arguments:
                column: ts                     # a column the model's `lateness` names
                interval: "INTERVAL 2 HOURS"   # a constant expression (a number for numbers)
                behind: now                    # now (default) or max

  The waterline is the one after the model's last completed step (its newest step record whose
  side-table writes have all landed, streamsql_step_records: the value `__waterline` holds for
  that step). The test fails, with one row, when

    behind: now   waterline < current_timestamp() - interval   (timestamp and date columns)
    behind: max   waterline < (max(column) over the model's table) - interval

  where the model's table is read at the version that step committed, so a step running beside
  the test does not move one side of the comparison without the other.

  and when the column has no waterline yet (no non-NULL value seen, or no step taken); with
  behind: max it passes while the model's table holds no value in the column. After a step the
  waterline is the largest value seen minus the lateness, so `interval` must be larger than the
  lateness for a healthy model to pass.
#}
{% macro test_waterline_within(model, column, interval, behind='now') %}
  {%- if not execute -%}
    {{ return("select 1 as waterline where false") }}
  {%- endif -%}
  {%- set name = "waterline_within on " ~ model.identifier -%}
  {%- if behind not in ['now', 'max'] -%}
    {%- do exceptions.raise_compiler_error(name ~ ": behind must be now or max, not " ~ behind) -%}
  {%- endif -%}
  {%- set node = streamsql_model_node(model) -%}
  {%- if node is not none and streamsql_key_like(node.config.get('lateness'), column) is none -%}
    {%- do exceptions.raise_compiler_error(name ~ ": " ~ column ~ " is not a lateness column of the model (its lateness config: " ~ (node.config.get('lateness') or 'none') ~ "), so it has no waterline.") -%}
  {%- endif -%}
  {%- if adapter.get_relation(database=model.database, schema=model.schema, identifier=model.identifier) is none -%}
    {{ return("select 'the model has no table yet: run dbt run first' as problem") }}
  {%- endif -%}

  {%- set columns = adapter.get_columns_in_relation(model) | selectattr('name', 'equalto', column) | list -%}
  {%- if columns | length == 0 -%}
    {%- for candidate in adapter.get_columns_in_relation(model) -%}
      {%- if candidate.name | lower == column | lower -%}{%- do columns.append(candidate) -%}{%- endif -%}
    {%- endfor -%}
  {%- endif -%}
  {%- if columns | length == 0 -%}
    {%- do exceptions.raise_compiler_error(name ~ ": the model has no column " ~ column ~ ".") -%}
  {%- endif -%}
  {%- set quoted = adapter.quote(columns[0].name) -%}
  {%- set dtype = columns[0].dtype | lower -%}
  {%- if behind == 'now' and not (dtype.startswith('timestamp') or dtype == 'date') -%}
    {%- do exceptions.raise_compiler_error(name ~ ": behind: now compares with the current time, which a " ~ dtype ~ " column cannot be; use behind: max.") -%}
  {%- endif -%}

  {%- set records = streamsql_step_records(model, 1) -%}
  {%- if records | length == 0 -%}
    {%- do exceptions.raise_compiler_error(name ~ ": " ~ model ~ " has no step record in its Delta history: it was not built by incremental_view.") -%}
  {%- endif -%}
  {%- set record = records[0] -%}
  {%- set key = streamsql_key_like(record.get('waterline'), column) -%}
  {%- set value = record['waterline'][key] if key is not none else none -%}
  {%- set waterline = "cast(null as " ~ dtype ~ ")" if value is none
        else "cast('" ~ (value | replace("'", "''")) ~ "' as " ~ dtype ~ ")" -%}
  {%- set reference = "current_timestamp()" if behind == 'now'
        else "(select max(" ~ quoted ~ ") from " ~ model ~ " version as of " ~ (record['model_version'] | int) ~ ")" -%}

with waterline as (
    select {{ waterline }} as waterline, {{ reference }} as reference
)
select
    '{{ columns[0].name }}' as column_name,
    {{ record['step'] }} as step,
    waterline,
    reference,
    cast(reference - waterline as string) as behind_by,
    '{{ interval | replace("'", "''") }}' as allowed,
    '{{ behind }}' as behind
from waterline
where {% if behind == 'max' %}reference is not null and {% endif -%}
      (waterline is null or waterline < reference - ({{ interval }}))
{% endmacro %}
