{#
  The demo's raw event tables and a seeded generator of out-of-order events.

    dbt run-operation create_demo_sources              # (re)create the five source tables, empty
    dbt run-operation generate_step --args '{step: 1}' # one step's worth of events

  Every table is a Delta table with the change data feed on, which is what incremental_view reads.
  `shipments` keeps only an hour of removed files (delta.deletedFileRetentionDuration): the models
  that read it show the retention guard's warning in their step line (docs/steps.md).
  Event time is simulated: step n's clock reads 2024-01-01 00:00 + n * step_minutes, and each event
  is stamped up to `disorder` minutes before that clock, so events arrive out of order. A share
  `late_share` of the events is stamped well below the waterline (more than lateness + one step
  behind) and is quarantined by the LATENESS models; `bad_share` of the purchases carry an
  undecodable or far-future date_time. Each step also updates and deletes a share of the previous
  step's purchases and orders (one MERGE per table: new rows, updates and deletes in one commit),
  deletes a share of the last hour's sensor readings and changes one product's price. Everything is drawn with rand(seed), so a run is
  reproducible for a given `seed`.
#}

{% macro create_demo_sources() %}
  {%- set raw = var('raw_schema', 'demo_raw') -%}
  {%- set cdf = "using delta tblproperties ('delta.enableChangeDataFeed' = 'true')" -%}
  {%- set statements = [
      "create schema if not exists " ~ raw,
      "create or replace table " ~ raw ~ ".purchases (purchase_id bigint, date_time string, credit_card bigint, amount decimal(10,2)) " ~ cdf,
      "create or replace table " ~ raw ~ ".sensors (sensor_id int, room string, ts timestamp, temp double) " ~ cdf,
      "create or replace table " ~ raw ~ ".orders (rowtime timestamp, productId int, orderId bigint, units int) " ~ cdf,
      "create or replace table " ~ raw ~ ".products (rowtime timestamp, productId int, name string, unitPrice decimal(10,2)) " ~ cdf,
      "create or replace table " ~ raw ~ ".shipments (rowtime timestamp, orderId bigint) "
        ~ "using delta tblproperties ('delta.enableChangeDataFeed' = 'true', "
        ~ "'delta.deletedFileRetentionDuration' = 'interval 1 hour')",
  ] -%}
  {%- for statement in statements -%}
    {%- do run_query(statement) -%}
  {%- endfor -%}
  {{ log("created the demo's source tables in schema " ~ raw, info=True) }}
{% endmacro %}


{% macro generate_step(step, rate=200, disorder=45, late_share=0.03, bad_share=0.01,
                       update_share=0.05, delete_share=0.02, seed=42, step_minutes=30) %}
  {%- set raw = var('raw_schema', 'demo_raw') -%}
  {%- set step = step | int -%}
  {%- set rate = rate | int -%}
  {%- set step_minutes = step_minutes | int -%}
  {%- set s = (seed | int) * 1000000 + step * 1000 -%}
  {#- the step's clock, and the id range of this step's and the previous step's rows -#}
  {%- set now = "timestampadd(MINUTE, " ~ (step * (step_minutes | int)) ~ ", timestamp'2024-01-01 00:00:00')" -%}
  {%- set first_id = step * 1000000 -%}
  {%- set prev_lo = (step - 1) * 1000000 -%}
  {%- set prev_hi = step * 1000000 -%}
  {%- set rows = "range(0, " ~ rate ~ ", 1, 1)" -%}

  {%- set statements = [] -%}

  {#- purchases (seed 000): date_time is a string; a few are garbage or far in the future -#}
  {%- do statements.append(
      "merge into " ~ raw ~ ".purchases t using ("
      ~ "select " ~ first_id ~ " + id as purchase_id, "
      ~ "case when rand(" ~ (s + 3) ~ ") < " ~ (bad_share / 2) ~ " then 'n/a' "
      ~ "when rand(" ~ (s + 3) ~ ") < " ~ bad_share ~ " then '2099-01-01 00:00:00' "
      ~ "else date_format(" ~ demo_event_time(s + 1, now, late_share, disorder, step_minutes) ~ ", 'yyyy-MM-dd HH:mm:ss') end as date_time, "
      ~ "1 + cast(rand(" ~ (s + 4) ~ ") * 20 as bigint) as credit_card, "
      ~ "cast(1 + rand(" ~ (s + 5) ~ ") * 99 as decimal(10,2)) as amount, 'insert' as action from " ~ rows
      ~ " union all select purchase_id, date_time, credit_card, amount + 1, 'update' from " ~ raw ~ ".purchases where "
      ~ demo_picked("purchase_id", update_share, s + 6, prev_lo, prev_hi)
      ~ " union all select purchase_id, date_time, credit_card, amount, 'delete' from " ~ raw ~ ".purchases where "
      ~ demo_picked("purchase_id", delete_share, s + 7, prev_lo, prev_hi)
      ~ " and not (" ~ demo_picked("purchase_id", update_share, s + 6, prev_lo, prev_hi) ~ ")"
      ~ ") s on t.purchase_id = s.purchase_id and s.action <> 'insert' "
      ~ "when matched and s.action = 'delete' then delete "
      ~ "when matched then update set amount = s.amount "
      ~ "when not matched and s.action = 'insert' then insert (purchase_id, date_time, credit_card, amount) "
      ~ "values (s.purchase_id, s.date_time, s.credit_card, s.amount)") -%}

  {#- sensors (seed 004): 12 sensors in 4 rooms -#}
  {%- do statements.append(
      "insert into " ~ raw ~ ".sensors select sensor_id, "
      ~ "element_at(array('kitchen', 'office', 'lab', 'lobby'), sensor_id % 4 + 1), ts, "
      ~ "round(18 + (sensor_id % 4) + rand(" ~ (s + 8) ~ ") * 4, 2) from (select id, "
      ~ "cast(1 + rand(" ~ (s + 9) ~ ") * 12 as int) as sensor_id, " ~ demo_event_time(s + 10, now, late_share, disorder, step_minutes) ~ " as ts from " ~ rows ~ ")") -%}
  {%- do statements.append(
      "delete from " ~ raw ~ ".sensors where ts >= timestampadd(MINUTE, -" ~ (step_minutes * 2) ~ ", " ~ now ~ ") "
      ~ "and pmod(hash(sensor_id, ts, " ~ (s + 12) ~ "), 10000) < " ~ ((delete_share * 10000) | int)) -%}

  {#- products (Calcite): ten products; from step 2 on, one price change per step -#}
  {%- if step == 1 -%}
    {%- do statements.append(
        "insert into " ~ raw ~ ".products select " ~ now ~ ", cast(id as int), concat('product-', id), "
        ~ "cast(0.5 + id * 0.25 as decimal(10,2)) from range(1, 11, 1, 1)") -%}
  {%- else -%}
    {%- do statements.append(
        "update " ~ raw ~ ".products set unitPrice = unitPrice + 0.10, rowtime = " ~ now
        ~ " where productId = " ~ (step % 10 + 1)) -%}
  {%- endif -%}

  {#- orders (Calcite): some are cancelled (deleted) or change their units in the next step -#}
  {%- do statements.append(
      "merge into " ~ raw ~ ".orders t using ("
      ~ "select " ~ demo_event_time(s + 13, now, late_share, disorder, step_minutes) ~ " as rowtime, "
      ~ "cast(1 + rand(" ~ (s + 14) ~ ") * 10 as int) as productId, " ~ first_id ~ " + id as orderId, "
      ~ "cast(1 + rand(" ~ (s + 15) ~ ") * 9 as int) as units, 'insert' as action from " ~ rows
      ~ " union all select rowtime, productId, orderId, units + 1, 'update' from " ~ raw ~ ".orders where "
      ~ demo_picked("orderId", update_share, s + 16, prev_lo, prev_hi)
      ~ " union all select rowtime, productId, orderId, units, 'delete' from " ~ raw ~ ".orders where "
      ~ demo_picked("orderId", delete_share, s + 17, prev_lo, prev_hi)
      ~ " and not (" ~ demo_picked("orderId", update_share, s + 16, prev_lo, prev_hi) ~ ")"
      ~ ") s on t.orderId = s.orderId and s.action <> 'insert' "
      ~ "when matched and s.action = 'delete' then delete "
      ~ "when matched then update set units = s.units "
      ~ "when not matched and s.action = 'insert' then insert (rowtime, productId, orderId, units) "
      ~ "values (s.rowtime, s.productId, s.orderId, s.units)") -%}

  {#- shipments: 80% of the previous step's orders ship 0-100 minutes after they were placed -#}
  {%- do statements.append(
      "insert into " ~ raw ~ ".shipments select timestampadd(SECOND, "
      ~ "cast(pmod(hash(orderId, " ~ (s + 18) ~ "), 6000) as int), rowtime), orderId from "
      ~ raw ~ ".orders where " ~ demo_picked("orderId", 0.8, s + 19, prev_lo, prev_hi)) -%}

  {%- for statement in statements -%}
    {%- do run_query(statement) -%}
  {%- endfor -%}
  {{ log("generated step " ~ step ~ ": " ~ rate ~ " new events per stream", info=True) }}
{% endmacro %}


{#- An event time: usually up to `disorder` minutes before the step's clock `now`; with probability
    late_share far enough back to be below the waterline (lateness 1 hour + one step + 15 min). -#}
{% macro demo_event_time(seed, now, late_share, disorder, step_minutes) -%}
  case when rand({{ seed }}) < {{ late_share }}
       then timestampadd(SECOND, -cast((75 + {{ step_minutes }} + rand({{ seed + 100 }}) * 120) * 60 as int), {{ now }})
       else timestampadd(SECOND, -cast(rand({{ seed + 200 }}) * {{ disorder }} * 60 as int), {{ now }})
  end
{%- endmacro %}


{#- A deterministic share of the rows whose id is in [lo, hi) (the previous step's rows). -#}
{% macro demo_picked(id_column, share, salt, lo, hi) -%}
  {{ id_column }} >= {{ lo }} and {{ id_column }} < {{ hi }}
  and pmod(hash({{ id_column }}, {{ salt }}), 10000) < {{ (share * 10000) | int }}
{%- endmacro %}
