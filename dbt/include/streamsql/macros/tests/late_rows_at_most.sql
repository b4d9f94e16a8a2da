{#
  Generic test: LATENESS quarantined at most so many of an incremental view's changes over its
  last steps. For a cron job that alarms when a source starts sending late or broken rows.

    models:
      - name: stg_purchases
        data_tests:
          - late_rows_at_most:                 # or dbt_streamsql.late_rows_at_most
              arguments:
                max_rows: 100                  # rows in <model>__late ...
                max_share: 0.05                # ... or share of the changes read
                last_steps: 10                 # over the last 10 steps (default 1)
                reasons: [late, future]        # default: late, null, future

  Over the last `last_steps` completed steps (the newest step records in the model's Delta
  history, from the newest whose side-table writes have all landed: streamsql_step_records; runs
  whose inputs did not change are not steps):

    quarantined  = rows of <model>__late with _streamsql_step in those steps and
                   _streamsql_reason in `reasons` (the sum of the steps' `late`, when every
                   reason is counted)
    changes_read = the rows of the inputs' change feeds those steps read: for each input, the
                   rows of table_changes() between the version the step before them read it up
                   to and the version the last of them did; every row of the input, as of the
                   version the model's first step read, when that step is among them (the sum
                   of the steps' `changes_read`)

  It fails, with one row, when quarantined > max_rows, or when quarantined > 0 and
  quarantined / changes_read > max_share (also when changes_read is 0). Without either argument,
  max_rows is 0: any quarantined row fails it. Passes while the model has taken no step.
#}
{% macro test_late_rows_at_most(model, max_rows=none, max_share=none, last_steps=1,
                                reasons=['late', 'null', 'future']) %}
  {%- if not execute -%}
    {{ return("select 1 as quarantined where false") }}
  {%- endif -%}
  {%- set name = "late_rows_at_most on " ~ model.identifier -%}
  {%- if max_rows is none and max_share is none -%}
    {%- set max_rows = 0 -%}
  {%- endif -%}
  {%- if (last_steps | int) < 1 -%}
    {%- do exceptions.raise_compiler_error(name ~ ": last_steps must be 1 or more, not " ~ last_steps) -%}
  {%- endif -%}
  {%- set last_steps = last_steps | int -%}
  {%- set reasons = [reasons] if reasons is string else reasons -%}
  {%- for reason in reasons -%}
    {%- if reason not in ['late', 'null', 'future'] -%}
      {%- do exceptions.raise_compiler_error(name ~ ": reasons may hold late, null and future, not " ~ reason) -%}
    {%- endif -%}
  {%- endfor -%}
  {%- set node = streamsql_model_node(model) -%}
  {%- if node is not none and not node.config.get('lateness') -%}
    {%- do exceptions.raise_compiler_error(name ~ ": the model declares no lateness, so nothing is quarantined (use the test on a model with a `lateness` config).") -%}
  {%- endif -%}
  {%- if adapter.get_relation(database=model.database, schema=model.schema, identifier=model.identifier) is none -%}
    {{ return("select 'the model has no table yet: run dbt run first' as problem") }}
  {%- endif -%}

  {%- set records = streamsql_step_records(model, last_steps + 1) -%}
  {%- if records | length == 0 -%}
    {%- do exceptions.raise_compiler_error(name ~ ": " ~ model ~ " has no step record in its Delta history: it was not built by incremental_view.") -%}
  {%- endif -%}
  {%- set last = records[0]['step'] -%}
  {%- if last == 0 -%}
    {{ return("select 0 as quarantined where false") }}
  {%- endif -%}
  {%- set first = [last - last_steps + 1, 1] | max -%}
  {%- set late = adapter.get_relation(database=model.database, schema=model.schema, identifier=model.identifier ~ '__late') -%}
  {%- if late is none -%}
    {%- do exceptions.raise_compiler_error(name ~ ": " ~ model ~ "__late does not exist: the model declares no lateness, or has not run since it does.") -%}
  {%- endif -%}

  {#- the inputs' changes those steps read (only for max_share) -#}
  {%- set counts = [] -%}
  {%- if max_share is not none -%}
    {%- set by_step = {} -%}
    {%- for record in records -%}{%- do by_step.update({record['step']: record}) -%}{%- endfor -%}
    {%- if (first - 1) not in by_step -%}
      {%- do exceptions.raise_compiler_error(name ~ ": the Delta history of " ~ model ~ " no longer holds the record of step " ~ (first - 1) ~ ", so the changes of steps " ~ first ~ "-" ~ last ~ " cannot be counted (lower last_steps, or keep more history: delta.logRetentionDuration).") -%}
    {%- endif -%}
    {%- set before = by_step[first - 1]['input_versions'] or {} -%}
    {%- for input, upto in (records[0]['input_versions'] or {}).items() -%}
      {%- set quoted = input.split('.') | map('string') | map('replace', '`', '``') | join('`.`') -%}
      {%- set start = before.get(input) -%}
      {%- if start is none -%}
        {%- set at = by_step[first]['input_versions'][input] -%}
        {%- do counts.append("select count(*) as n from `" ~ quoted ~ "` version as of " ~ at) -%}
        {%- set start = at -%}
      {%- endif -%}
      {%- if upto > start -%}
        {%- do counts.append("select count(*) as n from table_changes('" ~ input ~ "', " ~ (start + 1) ~ ", " ~ upto ~ ")") -%}
      {%- endif -%}
    {%- endfor -%}
  {%- endif -%}
  {%- do counts.append("select cast(0 as bigint) as n") -%}

with quarantined as (
    select count(*) as n
    from {{ late }}
    where _streamsql_step between {{ first }} and {{ last }}
      and _streamsql_reason in ('{{ reasons | join("', '") }}')
),
changes as (
    select cast(sum(n) as bigint) as n from (
        {{ counts | join('\n        union all ') }}
    ) as _streamsql_counts
)
select
    {{ first }} as first_step,
    {{ last }} as last_step,
    q.n as quarantined,
    {% if max_share is not none %}c.n{% else %}cast(null as bigint){% endif %} as changes_read,
    {% if max_share is not none %}cast(q.n as double) / nullif(c.n, 0){% else %}cast(null as double){% endif %} as share,
    {{ max_rows if max_rows is not none else 'cast(null as bigint)' }} as max_rows,
    {{ max_share if max_share is not none else 'cast(null as double)' }} as max_share,
    '{{ reasons | join(", ") }}' as reasons
from quarantined as q
cross join changes as c
where false
{%- if max_rows is not none %}
   or q.n > {{ max_rows }}
{%- endif %}
{%- if max_share is not none %}
   or (q.n > 0 and (c.n = 0 or cast(q.n as double) / c.n > {{ max_share }}))
{%- endif %}
{% endmacro %}
