-- Stream-table join (Calcite, "Joining streams to tables"): each order with its product's
-- current unit price. A price change re-prices that product's orders (no temporal table:
-- the result is always q(current inputs)).
select
    o.rowtime,
    o.orderId as order_id,
    o.productId as product_id,
    p.name as product_name,
    o.units,
    p.unitPrice as unit_price,
    o.units * p.unitPrice as amount
from {{ source('raw', 'orders') }} as o
join {{ source('raw', 'products') }} as p
  on o.productId = p.productId
