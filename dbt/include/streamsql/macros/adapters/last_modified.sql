{#
  `dbt source freshness` of a source without `loaded_at_field`: the time of its Delta table's
  last commit (StreamSQLAdapter.streamsql_last_modified reads it from Delta's log). dbt asks for
  a result of (schema, identifier, last_modified, snapshotted_at), one row a relation.
#}
{% macro streamsql__get_relation_last_modified(information_schema, relations) -%}
  {{ return(adapter.streamsql_last_modified(relations)) }}
{%- endmacro %}
