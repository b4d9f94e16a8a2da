"""The configs of an incremental_view model: each declared once, as a field of `ModelSettings`
(model.py, `setting` of config_kinds.py); here is what is derived from the declarations.

`MODEL_CONFIGS` lists every config a step obeys in the order of docs/configuration.md's table
(a unit test checks the table against it): dbt's `materialized`, then the model's settings, then
the configs dbt applies itself. `model_settings` builds the model as a step sees it from dbt's
config; a value a step cannot obey fails the model before the step reads anything, with the
model, the config and the fix named. `dbt_config_fields` gives dbt's config class
(impl.StreamSQLConfig) a field for each setting dbt-spark does not declare.

No config may be silently ignored. dbt itself handles `DBT_OWN` whatever the materialization.
Any other key an incremental_view model carries is either a dbt or dbt-spark config this
materialization does not apply (`NOT_APPLIED`, warned about when it is set to something other
than its default) or a key nobody reads, most likely a misspelling (warned about, with the
nearest known name).
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from dbt.adapters.streamsql.execution.shared.config_kinds import (
    DBT,
    ConfigSpec,
    ValueKind,
    declared_configs,
)
from dbt.adapters.streamsql.execution.shared.model import ModelSettings


def _applied_by_dbt(name: str, docs_type: str, doc: str, docs_default: str = "none") -> ConfigSpec:
    """A config dbt applies itself, as for any materialization: declared for the docs table."""
    return ConfigSpec(name, ValueKind(docs_type), DBT, doc, docs_default_text=docs_default)


# The configs a step reads, from `ModelSettings`' declarations.
SETTINGS: Tuple[ConfigSpec, ...] = declared_configs(ModelSettings)

# Every config incremental_view obeys, in the order of the docs table.
MODEL_CONFIGS: Tuple[ConfigSpec, ...] = (
    _applied_by_dbt("materialized", "string", "Every `dbt run` is one step of the model", ""),
    *SETTINGS,
    _applied_by_dbt(
        "full_refresh", "boolean", "`false` makes `dbt run --full-refresh` leave this model alone"
    ),
    _applied_by_dbt("pre_hook", "SQL", "Run before and after the step"),
    _applied_by_dbt("post_hook", "SQL", "Run before and after the step"),
    _applied_by_dbt("persist_docs", "map", "Applied to the model's table after the step"),
)
CONFIGS_BY_NAME = {spec.name: spec for spec in MODEL_CONFIGS}

# The configs a step obeys, with the spellings dbt also accepts for the hooks.
OBEYED = set(CONFIGS_BY_NAME) | {"pre-hook", "post-hook", "file_format"}


def model_settings(
    name: str, schema: str, config: Mapping[str, Any], full_refresh: bool
) -> ModelSettings:
    """The model `schema.name` as a step sees it: its table and the configs it obeys.

    Raises:
        ConfigError: a config has a value the step cannot obey (config_kinds.py).
    """
    fields = {spec.field: spec.read(name, config.get(spec.name)) for spec in SETTINGS}
    return ModelSettings(
        name=name, schema=schema, identifier=name, full_refresh=full_refresh, **fields
    )


def dbt_config_fields(base: type) -> List[Tuple[str, Any, Any]]:
    """The fields dbt's config class adds to `base` (dbt-spark's `SparkConfig`), for
    `dataclasses.make_dataclass`: one per setting `base` does not declare, typed as a user writes
    it, unset by default."""
    declared = {field.name for field in dataclasses.fields(base)}
    return [
        (spec.name, Optional[spec.kind.declared], dataclasses.field(default=None))
        for spec in SETTINGS
        if spec.name not in declared
    ]


# dbt's own configs: dbt handles them for every materialization (selection, naming, docs,
# grouping, metadata, quoting), or another node reads them (event_time for microbatch models).
DBT_OWN_FALLBACK = {
    "enabled",
    "alias",
    "schema",
    "database",
    "tags",
    "meta",
    "group",
    "docs",
    "access",
    "quoting",
    "event_time",
    "static_analysis",
    "freshness",
    "description",
}

# dbt and dbt-spark configs incremental_view does not apply: (why, what to do instead).
NOT_APPLIED: Dict[str, Tuple[str, str]] = {
    "incremental_strategy": (
        "each step applies its change itself (an INSERT or one MERGE)",
        "remove it",
    ),
    "clustered_by": ("it buckets Hive tables", "use liquid_clustered_by"),
    "buckets": ("it buckets Hive tables", "use liquid_clustered_by"),
    "options": ("incremental_view tables are Delta tables with fixed options", "use tblproperties"),
    "merge_update_columns": ("a step's MERGE updates whole rows", "remove it"),
    "column_types": ("it applies to seeds", "cast the column in the model's SELECT"),
    "grants": ("incremental_view does not run GRANT statements", "grant in a post-hook"),
    "batch_size": ("it configures microbatch models", "remove it"),
    "lookback": ("it configures microbatch models", "remove it"),
    "begin": ("it configures microbatch models", "remove it"),
    "concurrent_batches": ("it configures microbatch models", "remove it"),
    "on_configuration_change": ("it configures materialized views", "remove it"),
    "sql_header": ("incremental_view does not send it before its statements", "use a pre-hook"),
    "packages": ("it configures Python models", "remove it"),
}
# Defaults dbt fills in for some of them: a config equal to its default is not "set".
NOT_APPLIED_DEFAULTS: Dict[str, Any] = {"lookback": 1, "on_configuration_change": "apply"}


def dbt_own_configs() -> set:
    """The config names dbt's model config declares (and their aliases such as `post-hook`)."""
    try:
        from dbt.artifacts.resources import ModelConfig
    except ImportError:  # dbt-core is not importable: its configs as of 1.11
        return set(DBT_OWN_FALLBACK) | set(NOT_APPLIED) | {"unique_key", "on_schema_change"}
    names = set(DBT_OWN_FALLBACK)
    for spec in dataclasses.fields(ModelConfig):
        if spec.name.startswith("_"):
            continue
        names.add(spec.name)
        alias = spec.metadata.get("alias")
        if alias:
            names.add(alias)
    return names


def adapter_configs() -> set:
    """The configs dbt-spark declares (`SparkConfig`) and the ones declared here.

    The adapter's `StreamSQLConfig` (impl.py) is `SparkConfig` with `dbt_config_fields`: it
    adds no others."""
    try:
        from dbt.adapters.spark.impl import SparkConfig
    except ImportError:  # dbt-spark is not importable: its configs as of 1.11
        spark = {"file_format", "location_root", "partition_by", "clustered_by", "buckets"}
        return spark | {"options", "merge_update_columns"} | set(CONFIGS_BY_NAME)
    names = {spec.name for spec in dataclasses.fields(SparkConfig)}
    return {n for n in names if not n.startswith("_")} | set(CONFIGS_BY_NAME)


def is_set(name: str, value: Any) -> bool:
    """Whether a config carries a value of its own (not empty, not dbt's default)."""
    if value is None or value == {} or value == [] or value == "":
        return False
    if name in NOT_APPLIED_DEFAULTS and str(value) == str(NOT_APPLIED_DEFAULTS[name]):
        return False
    if name == "file_format":
        return str(value).lower() != "delta"
    return True


def config_warnings(model: str, config: Mapping[str, Any], known: Sequence[str] = ()) -> List[str]:
    """A warning for each config of `model` that incremental_view ignores.

    `known`: every config name dbt or an adapter declares (`dbt_own_configs` and
    `adapter_configs` when empty).
    """
    names = set(known) or (dbt_own_configs() | adapter_configs())
    names |= OBEYED
    warnings = []
    for key in sorted(config):
        value = config[key]
        if key == "file_format" and is_set(key, value):
            warnings.append(
                f"Model {model}: config file_format = {value!r} is ignored: incremental_view "
                "tables are always Delta tables. Remove it."
            )
        elif key in NOT_APPLIED and is_set(key, value):
            why, instead = NOT_APPLIED[key]
            warnings.append(
                f"Model {model}: config {key} is ignored by incremental_view: "
                f"{why}. Instead: {instead}."
            )
        elif key not in names and key not in NOT_APPLIED:
            close = difflib.get_close_matches(
                key, sorted(OBEYED | set(NOT_APPLIED)), n=1, cutoff=0.75
            )
            hint = f" Did you mean {close[0]!r}?" if close else ""
            warnings.append(
                f"Model {model}: config {key!r} is not a config of incremental_view or of dbt, "
                f"and nothing reads it.{hint} (Keys of your own belong under `meta`.)"
            )
    return warnings
