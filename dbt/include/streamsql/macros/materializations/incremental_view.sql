{#
  incremental_view: every `dbt run` is one step. The adapter (StreamSQLAdapter.streamsql_step)
  reads the inputs' changes, plans and applies the model's change; this macro only glues dbt's
  hooks and results around it, hands over the macros that make the side tables' statements
  (macros/side_tables/), which render in this model's context, and dbt's `write`.
#}
{% materialization incremental_view, adapter='streamsql' %}
  {%- set target_relation = this.incorporate(type='table') -%}

  {{ run_hooks(pre_hooks) }}
  {#- an enforced contract: the query's columns and types against the model's YAML, at every
      step and before it writes anything (dbt's own check, as for a table: it names the columns
      that differ) -#}
  {%- if config.get('contract').enforced -%}
    {%- do get_assert_columns_equivalent(sql) -%}
  {%- endif -%}
  {#- `write`: the statements the step sent, with their roles, go to target/run/ as for every
      materialization (dbt compile still shows the SELECT, in target/compiled/) -#}
  {%- set response = adapter.streamsql_step(target_relation, sql, model.config, should_full_refresh(),
                                            streamsql_side_table_macros(), write) -%}
  {% do store_result('main', response=response) %}
  {{ run_hooks(post_hooks) }}

  {% do persist_docs(target_relation, model) %}
  {% do adapter.commit() %}
  {{ return({'relations': [target_relation]}) }}
{% endmaterialization %}
