{#
  The DDL of an incremental view's side tables: `<model>__late`, `<model>__waterline` and
  `<model>__pending` (docs/tables.md). The adapter decides when a side table is created and which
  columns it has; these macros say how the CREATE statement looks. Each dispatches, so a project
  overrides one by defining `streamsql__<name>` (or `default__<name>`) in its own macros, the way
  it would override `spark__get_merge_sql`:

    create_late_table, create_waterline_table, create_pending_table   one side table each
    side_table_ddl                                                    what all three call

  Arguments: `relation` (the table, quoted when rendered), `columns` (each with `.name` and
  `.data_type`, in order; the adapter writes them by name and position, so keep all of them) and
  `replace` (true on a first or full-refresh run: CREATE OR REPLACE; false: CREATE TABLE IF NOT
  EXISTS, a config added since), and `location` (the path under the model's location_root) when
  the model has one: an override that takes no `location` still works for models without
  location_root. Each returns one statement.
#}

{% macro streamsql_create_late_table(relation, columns, replace, location=none) -%}
  {%- if location -%}
    {{ return(adapter.dispatch('create_late_table', 'dbt')(relation, columns, replace, location)) }}
  {%- else -%}
    {{ return(adapter.dispatch('create_late_table', 'dbt')(relation, columns, replace)) }}
  {%- endif -%}
{%- endmacro %}

{% macro default__create_late_table(relation, columns, replace, location=none) -%}
  {{ return(streamsql_side_table_ddl(relation, columns, replace, location=location)) }}
{%- endmacro %}


{% macro streamsql_create_waterline_table(relation, columns, replace, location=none) -%}
  {%- if location -%}
    {{ return(adapter.dispatch('create_waterline_table', 'dbt')(relation, columns, replace, location)) }}
  {%- else -%}
    {{ return(adapter.dispatch('create_waterline_table', 'dbt')(relation, columns, replace)) }}
  {%- endif -%}
{%- endmacro %}

{% macro default__create_waterline_table(relation, columns, replace, location=none) -%}
  {{ return(streamsql_side_table_ddl(relation, columns, replace, location=location)) }}
{%- endmacro %}


{% macro streamsql_create_pending_table(relation, columns, replace, location=none) -%}
  {%- if location -%}
    {{ return(adapter.dispatch('create_pending_table', 'dbt')(relation, columns, replace, location)) }}
  {%- else -%}
    {{ return(adapter.dispatch('create_pending_table', 'dbt')(relation, columns, replace)) }}
  {%- endif -%}
{%- endmacro %}

{% macro default__create_pending_table(relation, columns, replace, location=none) -%}
  {{ return(streamsql_side_table_ddl(relation, columns, replace, location=location)) }}
{%- endmacro %}


{#
  A Delta table with the change data feed and deletion vectors on, plus `properties` (a dict,
  added after those two and overriding them) and a `location` (a path) when given.
#}
{% macro streamsql_side_table_ddl(relation, columns, replace, properties=none, location=none) -%}
  {{ return(adapter.dispatch('side_table_ddl', 'dbt')(relation, columns, replace, properties, location)) }}
{%- endmacro %}

{% macro default__side_table_ddl(relation, columns, replace, properties=none, location=none) -%}
  {%- set all_properties = {'delta.enableChangeDataFeed': 'true', 'delta.enableDeletionVectors': 'true'} -%}
  {%- for key, value in (properties or {}).items() -%}
    {%- do all_properties.update({key | string: value | string}) -%}
  {%- endfor -%}
  CREATE {{ 'OR REPLACE TABLE' if replace else 'TABLE IF NOT EXISTS' }} {{ relation }} (
  {%- for column in columns -%}
    `{{ column.name | replace('`', '``') }}` {{ column.data_type }}{{ ', ' if not loop.last }}
  {%- endfor -%}
  ) USING delta
  {%- if location %} LOCATION '{{ location }}'{% endif %} TBLPROPERTIES (
  {%- for key, value in all_properties.items() -%}
    '{{ key }}' = '{{ value }}'{{ ', ' if not loop.last }}
  {%- endfor -%}
  )
{%- endmacro %}
