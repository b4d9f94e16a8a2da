-- Stream-stream join (Calcite, "Joining streams to streams"): orders shipped within an hour.
select
    o.orderId as order_id,
    o.productId as product_id,
    o.rowtime as order_time,
    s.rowtime as ship_time,
    timestampdiff(MINUTE, o.rowtime, s.rowtime) as minutes_to_ship
from {{ source('raw', 'orders') }} as o
join {{ source('raw', 'shipments') }} as s
  on o.orderId = s.orderId
where s.rowtime between o.rowtime and o.rowtime + interval 1 hour
