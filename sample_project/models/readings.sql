{{ config(materialized='table') }}
select 'kitchen' as room, timestamp'2024-01-01 10:05:00' as ts, 21.5 as temp
union all select 'kitchen', timestamp'2024-01-01 10:40:00', 22.5
union all select 'office', timestamp'2024-01-01 10:15:00', 19.0
