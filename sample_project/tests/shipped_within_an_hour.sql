-- Every row of orders_shipped_within_hour was shipped at most an hour after it was ordered.
select *
from {{ ref('orders_shipped_within_hour') }}
where minutes_to_ship < 0 or minutes_to_ship > 60
