{#
  incremental_view: every `dbt run` is one step. The adapter (StreamSQLAdapter.streamsql_step)
  reads the inputs' changes, plans and applies the model's change; this macro only glues dbt's
  hooks and results around it, and hands over the macros that make the side tables' statements
  (macros/side_tables/), which render in this model's context.
#}
{% materialization incremental_view, adapter='streamsql' %}
  {%- set target_relation = this.incorporate(type='table') -%}

  {{ run_hooks(pre_hooks) }}
  {%- set response = adapter.streamsql_step(target_relation, sql, model.config, should_full_refresh(),
                                            streamsql_side_table_macros()) -%}
  {% do store_result('main', response=response) %}
  {{ run_hooks(post_hooks) }}

  {% do persist_docs(target_relation, model) %}
  {% do adapter.commit() %}
  {{ return({'relations': [target_relation]}) }}
{% endmaterialization %}
