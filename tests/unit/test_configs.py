"""The config declarations (`setting` fields of execution/shared/model.py's `ModelSettings`): every
config reaches the step as declared, what configs.py and impl.py derive from them agrees with them,
and docs/configuration.md's tables say what the declarations say."""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from dbt.adapters.streamsql.execution.shared import config_kinds, configs
from dbt.adapters.streamsql.execution.shared.config_kinds import (
    ConfigError,
    declared_configs,
    setting,
)
from dbt.adapters.streamsql.execution.shared.configs import MODEL_CONFIGS, SETTINGS
from dbt.adapters.streamsql.execution.shared.model import STORAGE_PROPERTIES, ModelSettings

DOCS = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"

# A value of its own (not the default) for every config the step reads itself.
SET_VALUES = {
    "lateness": {"ts": "INTERVAL 1 HOUR"},
    "max_future": {"ts": "INTERVAL 1 DAY"},
    "final_state_retention": {"ts": "INTERVAL 1 DAY"},
    "watermark": {"ts": "INTERVAL 10 MINUTES"},
    "emit_final": True,
    "strategy": "recompute",
    "append_only": True,
    "partition_by": "day",
    "liquid_clustered_by": ["room", "day"],
    "tblproperties": {"delta.logRetentionDuration": "interval 60 days"},
    "location_root": "s3a://lake/views/",
    "on_schema_change": "append_new_columns",
    "unique_key": ["id", "day"],
    "waterline_retention": "interval 7 days",
    "pending_retention": "2 days",
    "compact_files": False,
    "rewrite_when_small": False,
    "rewrite_on_recompute": False,
}


def docs_table(heading_row: str) -> List[List[str]]:
    """The rows of the docs table whose header row starts with `heading_row`."""
    lines = DOCS.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading_row))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def names_in(cell: str) -> List[str]:
    return re.findall(r"`([a-z_]+)`", cell)


def test_every_config_the_step_reads_reaches_the_model_settings():
    read = [spec for spec in MODEL_CONFIGS if spec.field is not None]
    assert {spec.name for spec in read} == set(SET_VALUES)
    default = configs.model_settings("m", "demo", {}, full_refresh=False)
    model = configs.model_settings("m", "demo", SET_VALUES, full_refresh=False)
    for spec in read:
        assert getattr(model, spec.field) != getattr(default, spec.field), spec.name
    assert model.strategy == "recompute" and default.strategy == "auto"
    assert model.location == "s3a://lake/views/m"
    assert tuple(model.partition_by) == ("day",)
    assert tuple(model.cluster_by) == ("room", "day")
    assert model.waterline_retention == 7 * 86400 and default.waterline_retention == 30 * 86400
    forever = configs.model_settings("m", "demo", {"waterline_retention": "forever"}, False)
    assert forever.waterline_retention is None
    assert default.compact_files and not model.compact_files
    assert default.rewrite_when_small and not model.rewrite_when_small
    assert default.rewrite_on_recompute and not model.rewrite_on_recompute
    assert model.pending_retention == 2 * 86400 and default.pending_retention == 30 * 86400


def test_the_defaults_are_the_model_settings_defaults():
    default = configs.model_settings("m", "demo", {}, full_refresh=False)
    bare = ModelSettings(name="m", schema="demo", identifier="m")

    def plain(value):
        return list(value) if isinstance(value, (list, tuple)) else value

    for spec in MODEL_CONFIGS:
        if spec.field is not None:
            got, want = getattr(default, spec.field), getattr(bare, spec.field)
            assert plain(got) == plain(want), spec.name


def test_the_adapter_hands_every_config_to_the_step():
    """`impl.model_settings`, what the materialization calls, reads the same declaration (the
    `strategy` config once never reached the step: it was listed, documented and dropped)."""
    from dbt.adapters.streamsql.impl import StreamSQLAdapter, model_settings

    relation = StreamSQLAdapter.Relation.create(schema="demo", identifier="m", type="table")
    model = model_settings(relation, dict(SET_VALUES), full_refresh=True)
    assert model == configs.model_settings("m", "demo", SET_VALUES, full_refresh=True)
    assert model.strategy == "recompute"


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("lateness", "INTERVAL 1 HOUR", "is not a map of the model's output columns"),
        ("emit_final", "yes", "is not a boolean"),
        ("strategy", "fast", "is not one of auto, incremental, recompute"),
        ("partition_by", [1], "is not a column name or a list of column names"),
        ("tblproperties", ["a"], "is not a map of names to values"),
        ("location_root", 3, "is not a path"),
        ("waterline_retention", "a month", "is not a retention"),
        ("waterline_retention", "-1 day", "is not a retention"),
        ("waterline_retention", 30, "is not a retention"),
        ("compact_files", "off", "is not a boolean"),
        ("pending_retention", "soon", "is not a retention"),
        ("final_state_retention", ["1 day"], "is neither a map of lateness columns"),
    ],
)
def test_a_value_the_step_cannot_obey_names_the_model_and_the_config(name, value, message):
    with pytest.raises(ConfigError, match=rf"Model m: config {name} = .*{message}"):
        configs.model_settings("m", "demo", {name: value}, full_refresh=False)


def test_the_adapter_declares_to_dbt_every_config_it_obeys():
    from dbt.adapters.spark.impl import SparkConfig

    from dbt.adapters.streamsql.impl import StreamSQLConfig

    declared = {spec.name for spec in dataclasses.fields(StreamSQLConfig)}
    spark = {spec.name for spec in dataclasses.fields(SparkConfig)}
    dbt_own = configs.dbt_own_configs()
    for spec in MODEL_CONFIGS:
        assert spec.name in declared | dbt_own, f"{spec.name}: add it to StreamSQLConfig"
    assert declared - spark <= set(configs.CONFIGS_BY_NAME), "declare it in configs.py"


# ModelSettings' fields that no config sets: the model's table and the run's --full-refresh.
IDENTITY = ("name", "schema", "identifier", "full_refresh")


def test_every_settings_field_but_the_identity_is_a_declared_config():
    fields = [field.name for field in dataclasses.fields(ModelSettings)]
    assert fields[: len(IDENTITY)] == list(IDENTITY)
    assert [spec.field for spec in SETTINGS] == fields[len(IDENTITY) :]
    assert [spec for spec in MODEL_CONFIGS if spec.field is not None] == list(SETTINGS)
    assert all(spec.takes_effect != config_kinds.DBT for spec in SETTINGS)
    assert all(spec.takes_effect == config_kinds.DBT for spec in MODEL_CONFIGS if not spec.field)


def test_a_settings_default_is_the_declared_default_read_as_a_step_reads_it():
    bare = ModelSettings(name="m", schema="demo", identifier="m")
    for spec in SETTINGS:
        assert getattr(bare, spec.field) == spec.read("m", None), spec.name
        assert spec.read("m", spec.default) == spec.read("m", None), spec.name
    assert bare.waterline_retention == 30 * 86400.0 and bare.strategy == "auto"
    # each model gets maps of its own
    assert bare.lateness is not ModelSettings("n", "demo", "n").lateness


def holds(value: Any, hint: Any) -> bool:
    """Whether `value` is of the type `hint` (the few forms ModelSettings' annotations take)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin is typing.Union:
        return any(holds(value, arg) for arg in args)
    if origin in (Mapping, dict):
        return isinstance(value, Mapping) and all(
            holds(k, args[0]) and holds(v, args[1]) for k, v in value.items()
        )
    if origin in (Sequence, list, tuple):
        return isinstance(value, Sequence) and all(holds(item, args[0]) for item in value)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, hint)


def test_each_setting_holds_its_field_type_as_declared_and_as_set():
    hints = typing.get_type_hints(ModelSettings)
    default = configs.model_settings("m", "demo", {}, full_refresh=False)
    model = configs.model_settings("m", "demo", SET_VALUES, full_refresh=False)
    for spec in SETTINGS:
        for settings in (default, model):
            value = getattr(settings, spec.field)
            assert holds(value, hints[spec.field]), f"{spec.name}: {value!r}"
    assert not holds("30 days", hints["waterline_retention"])  # the check can fail


def test_dbt_s_config_class_is_derived_from_the_declarations():
    """impl.StreamSQLConfig: dbt-spark's SparkConfig with Delta as the file format and a field,
    typed as a user writes the config and unset by default, for each setting dbt-spark lacks."""
    from dbt.adapters.spark.impl import SparkConfig

    from dbt.adapters.streamsql.impl import StreamSQLConfig

    assert issubclass(StreamSQLConfig, SparkConfig) and dataclasses.is_dataclass(StreamSQLConfig)
    assert StreamSQLConfig.__module__ == "dbt.adapters.streamsql.impl"
    fields = {field.name: field for field in dataclasses.fields(StreamSQLConfig)}
    spark = {field.name for field in dataclasses.fields(SparkConfig)}
    assert fields["file_format"].default == "delta"
    added = [spec for spec in SETTINGS if spec.name not in spark]
    assert set(fields) - spark == {spec.name for spec in added}
    for spec in added:
        assert fields[spec.name].type == Optional[spec.kind.declared], spec.name
        assert fields[spec.name].default is None, spec.name
    assert {"lateness", "strategy", "liquid_clustered_by", "rewrite_when_small"} <= set(fields)
    # dbt reads and writes them as it does any adapter config (mashumaro, from the fields)
    written = {
        "lateness": {"ts": "INTERVAL 1 HOUR"},
        "final_state_retention": "forever",
        "emit_final": True,
        "unique_key": ["id", "day"],
        "strategy": "recompute",
        "waterline_retention": "7 days",
    }
    assert StreamSQLConfig.from_dict(written).to_dict(omit_none=True) == {
        "file_format": "delta",
        **written,
    }


def test_a_new_config_is_one_declaration():
    """The worked example of docs/architecture.md: one `setting` field, and the config's name,
    docs cells, default and reading follow from it."""

    @dataclass(frozen=True)
    class WithVacuum(ModelSettings):
        vacuum_files: bool = setting(
            config_kinds.BOOLEAN,
            config_kinds.NEXT_STEP,
            "Runs `VACUUM` on the model's table after it compacts it",
            default=False,
        )

    *known, spec = declared_configs(WithVacuum)
    assert tuple(known) == SETTINGS
    assert (spec.name, spec.field, spec.takes_effect) == (
        "vacuum_files",
        "vacuum_files",
        config_kinds.NEXT_STEP,
    )
    assert (spec.docs_type, spec.docs_default) == ("boolean", "`false`")
    assert WithVacuum("m", "demo", "m").vacuum_files is False
    assert spec.read("m", "true") is True
    with pytest.raises(
        ConfigError, match="Model m: config vacuum_files = 'often' is not a boolean"
    ):
        spec.read("m", "often")


def test_the_docs_config_table_is_the_declaration():
    rows = docs_table("| config | type | default |")
    documented: Dict[str, List[str]] = {}
    for row in rows:
        for name in names_in(row[0]):
            documented[name] = row
    assert list(documented) == [spec.name for spec in MODEL_CONFIGS]
    for spec in MODEL_CONFIGS:
        _, type_, default, *_ = documented[spec.name]
        assert (type_, default) == (spec.docs_type, spec.docs_default), spec.name


def test_the_docs_config_table_says_each_declared_doc_line():
    """A declaration's one line of what the config does is in its docs row, word for word."""
    rows = docs_table("| config | type | default |")
    said = {name: row[4] for row in rows for name in names_in(row[0])}
    for spec in MODEL_CONFIGS:
        assert spec.doc and spec.doc in said[spec.name], f"{spec.name}: {spec.doc!r}"


def test_the_docs_say_when_each_config_takes_effect_as_declared():
    said = {
        config_kinds.NEXT_STEP: "At the next step",
        config_kinds.TABLE_CREATED: "Only when the model's table is created",
        config_kinds.TABLE_BUILT: "Only when the model's table is built",
        config_kinds.SCHEMA_CHANGE: "At the next step whose query's columns differ",
    }
    rows = docs_table("| config | takes effect |")
    found = {name: row[1] for row in rows for name in names_in(row[0])}
    for spec in MODEL_CONFIGS:
        if spec.takes_effect == config_kinds.DBT:
            assert spec.name not in found, spec.name
        else:
            assert found[spec.name].startswith(said[spec.takes_effect]), spec.name


def test_only_storage_properties_reach_the_state_and_side_tables():
    model = ModelSettings(
        "m",
        "s",
        "m",
        tblproperties={
            "delta.logRetentionDuration": "interval 90 days",
            "DELTA.TARGETFILESIZE": "64mb",
            "delta.enableChangeDataFeed": "false",
            "delta.appendOnly": "true",
            "team": "ops",
        },
    )
    assert model.storage_properties == {
        "delta.logRetentionDuration": "interval 90 days",
        "DELTA.TARGETFILESIZE": "64mb",
    }
    assert ModelSettings("m", "s", "m").storage_properties == {}
    assert all(name.startswith("delta.") for name in STORAGE_PROPERTIES)


@pytest.mark.parametrize("name", ["waterline_retention", "pending_retention"])
def test_a_retention_of_none_is_refused_rather_than_guessed(name):
    """`none` may mean "keep none" or "no retention": the message names both ways to write it."""
    with pytest.raises(ConfigError) as refused:
        configs.model_settings("m", "demo", {name: "none"}, False)
    message = str(refused.value)
    assert f"Model m: config {name} = 'none' is not a retention" in message
    assert "'0 seconds'" in message and "'forever'" in message
    kept = configs.model_settings("m", "demo", {name: "0 seconds"}, False)
    assert getattr(kept, name) == 0
