-- Spend per credit card per hour (a tumbling window over the decoded purchases).
select
    credit_card,
    window(date_time, '1 hour').start as hour_start,
    sum(amount) as spend,
    count(*) as purchases
from {{ ref('stg_purchases') }}
group by credit_card, window(date_time, '1 hour')
