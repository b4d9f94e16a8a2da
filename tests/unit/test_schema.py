"""The model's columns checked before a step writes anything (execution/recovery/schema.py)."""

import pytest

from dbt.adapters.streamsql.execution.recovery.schema import check_types
from dbt.adapters.streamsql.execution.shared.errors import StepError
from dbt.adapters.streamsql.planning.plan import Column


def test_maps_variants_and_what_holds_them_are_columns_a_step_can_match():
    check_types(
        "events",
        [
            Column("id", "int"),
            Column("tags", "map<string,int>"),
            Column("nested", "array<struct<a:int,b:map<string,variant>>>"),
            Column("v", "variant"),
        ],
    )


def test_a_column_spark_cannot_compare_is_refused_naming_the_model_column_type_and_fix():
    with pytest.raises(StepError) as refused:
        check_types("shapes", [Column("id", "int"), Column("shape", "geometry(0)")])
    assert str(refused.value) == (
        "Model shapes: column shape is of type geometry(0), which Spark cannot compare, and a "
        "step matches the model's rows by every column. Convert the column in the model's "
        "SELECT to a type Spark compares (e.g. st_asbinary(shape) for a geometry, or "
        "CAST(shape AS STRING)), or leave it out."
    )
    with pytest.raises(StepError, match="array<geometry.0.>, whose geometry.0. values Spark"):
        check_types("shapes", [Column("shapes", "array<geometry(0)>")])
