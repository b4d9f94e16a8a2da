{{ config(materialized='table') }}
select room, window(ts, '1 hour').start as window_start, avg(temp) as avg_temp, count(*) as n
from {{ ref('readings') }}
group by room, window(ts, '1 hour')
