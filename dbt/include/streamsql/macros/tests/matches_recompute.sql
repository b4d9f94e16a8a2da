{#
  Generic test: an incremental view holds what its SELECT gives when recomputed from scratch over
  its inputs as its last completed step read them, except for what LATENESS quarantined and
  WATERMARK still holds (the guarantee stated in docs/steps.md, "The guarantee").

    models:
      - name: hourly_spend
        data_tests:
          - matches_recompute                 # or dbt_streamsql.matches_recompute
          - matches_recompute:
              arguments: {precision: 4}       # decimals kept when comparing float/decimal columns

  As multisets of rows (Z-sets: each row with a signed count), the test checks

      model == recompute(query) - late inserts + late deletes - held inserts + held deletes

  where late inserts/deletes are the rows of <model>__late (every reason: late, null, future) and
  held ones the unreleased rows of <model>__pending, all as of the model's last completed step n
  (its newest step record whose side-table writes have all landed: streamsql_step_records):

    model      the model's table at the version step n committed (VERSION AS OF), with the
               commits since that are no step's (an OPTIMIZE; a write by hand, which it sees)
    recompute  the query, each input it names read at the version step n read it up to (the
               record's input_versions), refs and sources alike (adapter.streamsql_pinned_query)
    late       the rows of <model>__late with _streamsql_step <= n, but those a streamsql_readmit
               of step n or before applied (_streamsql_readmitted_step <= n)
    held       the rows of <model>__pending held in step n or before and not released by then

  So the test holds at any moment: between two runs (inputs that moved since are not read), and
  beside a running step (a step that committed the model but not yet its side tables is not
  completed; its rows in the side tables are left out). Before the model's first step (no record
  of a step, or only that of the table's creation) it reads every table as it is now.

  It sums +1 per model row, -1 per recomputed row, +1/-1 per quarantined insert/delete and the
  weight of each held change, per distinct row, and fails with every row whose sum is not zero
  (that is EXCEPT ALL in both directions, with quarantined and held changes accounted for).
  `_streamsql_surplus` > 0: the model has that many copies too many; < 0: too few. A map
  column (or an array or struct holding one) is compared by its entries, sorted, as the step
  matches it (and shown so in the failing rows). Float and decimal columns are compared rounded
  to `precision` decimals, and rows left over that pair up on all other columns with float/decimal values
  within 10^-precision (relative, for values above 1) match too: an incrementally maintained
  SUM/AVG of doubles may differ from the recomputed one in the last bits, and a value halfway
  between two rounded values (22.9678125) can then round either way.

  The query is the model's SQL with each ref() replaced by the relation it names (for a versioned
  model, the version the ref names with v= or version=, else its latest, as dbt resolves it) and
  then rendered in the test's context (source(), var(), config() work); every table of the
  rendered query that the step record names is then read at its version there. Not supported:
  ephemeral refs, models whose SQL calls other macros, and the `where` config on this test.
#}
{% macro test_matches_recompute(model, precision=6) %}
  {%- if not execute -%}
    {{ return("select 1 as _streamsql_surplus where false") }}
  {%- endif -%}

  {#- the tested model's node -#}
  {%- set found = [] -%}
  {%- for node in graph.nodes.values() -%}
    {%- if node.resource_type == 'model' and (node.alias or node.name) | lower == model.identifier | lower
          and node.schema | lower == model.schema | lower -%}
      {%- do found.append(node) -%}
    {%- endif -%}
  {%- endfor -%}
  {%- if found | length != 1 -%}
    {%- do exceptions.raise_compiler_error("matches_recompute: cannot find the model whose table is " ~ model ~ " (use the test on a model, without a `where` config).") -%}
  {%- endif -%}
  {%- set node = found[0] -%}

  {#- its query, with each ref() replaced by the relation it names -#}
  {%- set state = {'code': node.raw_code} -%}
  {%- set pattern = "\\bref\\(\\s*(['\"])([^'\"]+)\\1\\s*(?:,\\s*(['\"])([^'\"]+)\\3\\s*)?(?:,\\s*v(?:ersion)?\\s*=\\s*(['\"]?)([^'\")\\s]+)\\5\\s*)?\\)" -%}
  {%- for match in modules.re.finditer(pattern, node.raw_code) -%}
    {%- set package = match.group(2) if match.group(4) else none -%}
    {%- set name = match.group(4) or match.group(2) -%}
    {%- set version = match.group(6) -%}
    {%- set targets = [] -%}
    {%- for candidate in graph.nodes.values() -%}
      {%- if candidate.resource_type in ('model', 'seed', 'snapshot') and candidate.name == name
            and (package is none or candidate.package_name == package) -%}
        {#- a versioned model: the version the ref names, or as dbt resolves it, the latest -#}
        {%- set has_version = candidate.resource_type == 'model' and candidate.version is not none -%}
        {%- set wanted = version if version is not none else (candidate.latest_version if has_version else none) -%}
        {%- if not has_version or wanted is none or candidate.version | string == wanted | string -%}
          {%- do targets.append(candidate) -%}
        {%- endif -%}
      {%- endif -%}
    {%- endfor -%}
    {%- if targets | length == 0 -%}
      {%- do exceptions.raise_compiler_error("matches_recompute on " ~ node.name ~ ": cannot resolve " ~ match.group(0)) -%}
    {%- endif -%}
    {%- set target = targets[0] -%}
    {%- if target.config.materialized == 'ephemeral' -%}
      {%- do exceptions.raise_compiler_error("matches_recompute on " ~ node.name ~ ": " ~ match.group(0) ~ " is ephemeral, which this test does not support.") -%}
    {%- endif -%}
    {%- set relation = api.Relation.create(database=target.database, schema=target.schema, identifier=(target.alias or target.name)) -%}
    {%- do state.update({'code': state['code'].replace(match.group(0), "'" ~ relation ~ "'")}) -%}
  {%- endfor -%}
  {%- set query = render(state['code']) -%}

  {#- the model's last completed step: the versions it read, the model as it committed it -#}
  {%- set records = streamsql_step_records(model, 1) -%}
  {%- set last = records[0] if records and records[0]['step'] > 0 else none -%}
  {%- set model_rows = model -%}
  {%- if last is not none -%}
    {%- set query = adapter.streamsql_pinned_query(query, last['input_versions']) -%}
    {%- set model_rows = model ~ " version as of " ~ (last['model_version'] | int) -%}
  {%- endif -%}

  {#- the model's own columns; floats and decimals are compared rounded -#}
  {%- set names = [] -%}
  {%- set exprs = [] -%}
  {%- set exact = [] -%}
  {%- set inexact = [] -%}
  {%- for column in adapter.get_columns_in_relation(model) -%}
    {%- if not column.name.startswith('_streamsql_') -%}
      {%- set quoted = adapter.quote(column.name) -%}
      {%- set dtype = column.dtype | lower -%}
      {%- do names.append(quoted) -%}
      {%- if dtype.startswith('double') or dtype.startswith('float') or dtype.startswith('decimal') -%}
        {%- do exprs.append("round(" ~ quoted ~ ", " ~ precision ~ ") as " ~ quoted) -%}
        {%- do inexact.append(quoted) -%}
      {%- else -%}
        {#- a map (or a value holding one) as a form Spark can group and compare -#}
        {%- set compared = adapter.streamsql_comparable(quoted, column.dtype) -%}
        {%- do exprs.append(quoted if compared == quoted else compared ~ " as " ~ quoted) -%}
        {%- do exact.append(quoted) -%}
      {%- endif -%}
    {%- endif -%}
  {%- endfor -%}
  {%- set select_list = exprs | join(', ') -%}
  {%- set tolerance = "1e-" ~ precision -%}

  {#- quarantined (LATENESS) and held (WATERMARK) changes, if the model declares them -#}
  {%- set late = none -%}
  {%- if node.config.get('lateness') or node.config.get('max_future') -%}
    {%- set late = adapter.get_relation(database=model.database, schema=model.schema, identifier=model.identifier ~ '__late') -%}
  {%- endif -%}
  {#- rows a streamsql_readmit applied are in the model: not set aside -#}
  {%- set marks = [] -%}
  {%- if late is not none -%}
    {%- for column in adapter.get_columns_in_relation(late) -%}
      {%- if column.name | lower == '_streamsql_readmitted_step' -%}
        {%- do marks.append(column.name) -%}
      {%- endif -%}
    {%- endfor -%}
  {%- endif -%}
  {%- set late_kept = [] -%}
  {%- if last is not none -%}
    {%- do late_kept.append('_streamsql_step <= ' ~ (last['step'] | int)) -%}
  {%- endif -%}
  {%- if marks and last is not none -%}
    {%- do late_kept.append('(_streamsql_readmitted_step is null or _streamsql_readmitted_step > ' ~ (last['step'] | int) ~ ')') -%}
  {%- elif marks -%}
    {%- do late_kept.append('_streamsql_readmitted_step is null') -%}
  {%- endif -%}
  {%- set pending = none -%}
  {%- if node.config.get('watermark') -%}
    {%- set pending = adapter.get_relation(database=model.database, schema=model.schema, identifier=model.identifier ~ '__pending') -%}
  {%- endif -%}

with signed_rows as (
    select {{ select_list }}, cast(1 as bigint) as _streamsql_w from {{ model_rows }}
    union all
    select {{ select_list }}, cast(-1 as bigint) as _streamsql_w from (
{{ query }}
    ) as _streamsql_recomputed
{%- if late is not none %}
    union all
    select {{ select_list }},
           cast(case when _streamsql_change = 'insert' then 1 else -1 end as bigint) as _streamsql_w
    from {{ late }}
  {%- if late_kept %}
    where {{ late_kept | join(' and ') }}
  {%- endif %}
{%- endif %}
{%- if pending is not none %}
    union all
    select {{ select_list }}, cast(_streamsql_weight as bigint) as _streamsql_w
    from {{ pending }}
  {%- if last is not none %}
    where _streamsql_held_step <= {{ last['step'] | int }}
      and (_streamsql_released_step is null or _streamsql_released_step > {{ last['step'] | int }})
  {%- else %}
    where _streamsql_released_step is null
  {%- endif %}
{%- endif %}
),
{#- rows whose signed count is not zero ... -#}
residual as (
    select {{ names | join(', ') }}, sum(_streamsql_w) as _streamsql_surplus
    from signed_rows
    group by {{ names | join(', ') }}
    having sum(_streamsql_w) <> 0
),
{#- ... are still a match when they pair up on the exact columns and their float/decimal values
    differ by no more than the tolerance (a value exactly halfway between two rounded values
    can round either way, depending on the order in which a SUM or AVG was added up) -#}
residual_keys as (
    select {% for c in exact %}{{ c }}, {% endfor %}sum(_streamsql_surplus) as _streamsql_net
    {%- for c in inexact %},
           coalesce(max({{ c }}) - min({{ c }}) <= {{ tolerance }} * greatest(1, abs(max({{ c }}))), true) as _streamsql_close_{{ loop.index }}
    {%- endfor %}
    from residual
    {% if exact %}group by {{ exact | join(', ') }}{% endif %}
)
select r.*
from residual as r
join residual_keys as k
  on {% for c in exact %}r.{{ c }} <=> k.{{ c }} and {% endfor %}true
where k._streamsql_net <> 0
{%- for c in inexact %} or not k._streamsql_close_{{ loop.index }}{% endfor %}
{% endmacro %}
