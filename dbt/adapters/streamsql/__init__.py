from dbt.adapters.base import AdapterPlugin

from dbt.adapters.streamsql.connections import StreamSQLConnectionManager, StreamSQLCredentials  # noqa
from dbt.adapters.streamsql.impl import StreamSQLAdapter
from dbt.include import streamsql

Plugin = AdapterPlugin(
    adapter=StreamSQLAdapter,  # type: ignore[arg-type]
    credentials=StreamSQLCredentials,
    include_path=streamsql.PACKAGE_PATH,
    dependencies=["spark"],
)
