-- Hopping windows (Calcite's HOP(rowtime, INTERVAL '15' MINUTE, INTERVAL '1' HOUR)): one-hour
-- totals emitted every 15 minutes, so each order counts in four windows.
select
    window(rowtime, '1 hour', '15 minutes').start as window_start,
    window(rowtime, '1 hour', '15 minutes').end as window_end,
    count(*) as orders,
    sum(units) as units,
    sum(amount) as revenue
from {{ ref('orders_enriched') }}
group by window(rowtime, '1 hour', '15 minutes')
