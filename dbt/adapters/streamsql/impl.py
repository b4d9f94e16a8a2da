"""The adapter: dbt-spark's, plus Delta defaults and incremental views."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Union

from dbt.adapters.base import BaseRelation
from dbt.adapters.spark.column import SparkColumn
from dbt.adapters.spark.impl import SparkAdapter, SparkConfig
from typing_extensions import TypeAlias

from dbt.adapters.streamsql.connections import StreamSQLConnectionManager

DEFAULT_FILE_FORMAT = "delta"

# Spark's schema tree (`SHOW TABLE EXTENDED`) names some types differently from SQL and DESCRIBE.
TREE_TYPE_TO_SQL = {"long": "bigint", "integer": "int", "short": "smallint", "byte": "tinyint"}
NESTED_TREE_TYPES = {"array", "map", "struct"}


@dataclass
class StreamSQLConfig(SparkConfig):
    file_format: str = DEFAULT_FILE_FORMAT
    lateness: Optional[Dict[str, str]] = None
    watermark: Optional[Dict[str, str]] = None
    max_future: Optional[Dict[str, str]] = None
    append_only: Optional[bool] = None
    unique_key: Optional[Union[List[str], str]] = None
    liquid_clustered_by: Optional[Union[List[str], str]] = None
    tblproperties: Optional[Dict[str, str]] = None


class StreamSQLAdapter(SparkAdapter):
    ConnectionManager: TypeAlias = StreamSQLConnectionManager  # type: ignore[assignment]
    AdapterSpecificConfigs: TypeAlias = StreamSQLConfig  # type: ignore[assignment]

    def pre_model_hook(self, config: Any) -> Any:
        """Make Delta the file format of every model, seed and snapshot that names none.

        dbt-spark's macros read `config.get('file_format')` in many places and fall back to
        parquet; setting the default on the node once keeps all of them consistent.
        """
        node_config = getattr(getattr(config, "model", None), "config", None)
        if node_config is not None and node_config.get("file_format") is None:
            node_config["file_format"] = DEFAULT_FILE_FORMAT
        return super().pre_model_hook(config)

    def parse_columns_from_information(self, relation: BaseRelation) -> List[SparkColumn]:
        """Columns from the schema tree, with the type names DESCRIBE and SQL use.

        Without this the catalog says `long` for a table listed with its schema tree and `bigint`
        for one described column by column. Nested types print as a bare `array`/`struct` in the
        tree, so for those the caller's DESCRIBE fallback is used instead (returns []).
        """
        columns = super().parse_columns_from_information(relation)
        if any(column.dtype in NESTED_TREE_TYPES for column in columns):
            return []
        for column in columns:
            column.dtype = TREE_TYPE_TO_SQL.get(column.dtype, column.dtype)
        return columns
