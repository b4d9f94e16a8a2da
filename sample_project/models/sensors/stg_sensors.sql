-- Seed 004's sensor measurements. WATERMARK 10 minutes holds each reading until a reading at
-- least 10 minutes newer has arrived; LATENESS 1 hour then judges it (models/sensors/sensors.yml).
select sensor_id, room, ts, temp
from {{ source('raw', 'sensors') }}
