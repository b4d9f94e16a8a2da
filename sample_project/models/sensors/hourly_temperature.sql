-- Seed 004: average temperature per room per 1-hour tumbling window
-- (Flink: GROUP BY TUMBLE(rowtime, INTERVAL '1' HOUR), room).
select
    room,
    window(ts, '1 hour').start as window_start,
    window(ts, '1 hour').end as window_end,
    avg(temp) as avg_temp,
    count(*) as readings
from {{ ref('stg_sensors') }}
group by room, window(ts, '1 hour')
