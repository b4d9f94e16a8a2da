-- Seed 000: the timestamp arrives as a string and is decoded here; LATENESS is declared on this
-- view's date_time (models/purchases/purchases.yml), not on the raw table.
select
    purchase_id,
    cast(date_time as timestamp) as date_time,
    credit_card,
    amount
from {{ source('raw', 'purchases') }}
