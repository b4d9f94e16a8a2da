"""The configs of an incremental_view model: which ones it obeys, and a warning for the rest.

No config may be silently ignored. A step obeys the configs in `OBEYED` (docs/configuration.md);
dbt itself handles `DBT_OWN` whatever the materialization. Any other key an incremental_view
model carries is either a dbt or dbt-spark config this materialization does not apply
(`NOT_APPLIED`, warned about when it is set to something other than its default) or a key
nobody reads, most likely a misspelling (warned about, with the nearest known name).

`on_schema_change` and `unique_key` are read here too (`model_options`): a value outside dbt's
four for `on_schema_change` fails the step before it reads anything.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Dict, List, Mapping, Sequence, Tuple

from dbt.adapters.streamsql.execution.errors import StepError

ON_SCHEMA_CHANGE = ("ignore", "fail", "append_new_columns", "sync_all_columns")
# dbt's default for incremental models, and the value dbt gives the config when it is not set.
DEFAULT_ON_SCHEMA_CHANGE = "ignore"

# What incremental_view does with a config, for the ones a step obeys.
OBEYED = {
    "materialized",
    "lateness",
    "max_future",
    "watermark",
    "emit_final",
    "append_only",
    "on_schema_change",
    "unique_key",
    "strategy",
    "partition_by",
    "liquid_clustered_by",
    "tblproperties",
    "location_root",
    "file_format",
    "full_refresh",
    "persist_docs",
    "pre-hook",
    "post-hook",
    "pre_hook",
    "post_hook",
}

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
    "contract": (
        "contracts are not enforced by incremental_view",
        "test the columns with dbt tests",
    ),
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


class ConfigError(StepError):
    """A config value the step cannot obey; the message names the model, config and fix."""


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
    """The configs dbt-spark and this adapter declare (`StreamSQLConfig`)."""
    from dbt.adapters.streamsql.impl import StreamSQLConfig

    return {
        spec.name for spec in dataclasses.fields(StreamSQLConfig) if not spec.name.startswith("_")
    }


def is_set(name: str, value: Any) -> bool:
    """Whether a config carries a value of its own (not empty, not dbt's default)."""
    if value is None or value == {} or value == [] or value == "":
        return False
    if name in NOT_APPLIED_DEFAULTS and str(value) == str(NOT_APPLIED_DEFAULTS[name]):
        return False
    if name == "contract":
        enforced = (
            value.get("enforced")
            if isinstance(value, Mapping)
            else getattr(value, "enforced", False)
        )
        return bool(enforced)
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


def model_options(model: str, config: Mapping[str, Any]) -> Tuple[str, Tuple[str, ...]]:
    """(on_schema_change, unique_key columns) of a model's config.

    Raises:
        ConfigError: on_schema_change is not one of dbt's four values, or unique_key is not a
            column name or a list of them.
    """
    mode = config.get("on_schema_change") or DEFAULT_ON_SCHEMA_CHANGE
    if not isinstance(mode, str) or mode.strip().lower() not in ON_SCHEMA_CHANGE:
        raise ConfigError(
            f"Model {model}: config on_schema_change = {mode!r} is not one of "
            f"{', '.join(ON_SCHEMA_CHANGE)} (dbt's values). Use one of them; the default is "
            f"{DEFAULT_ON_SCHEMA_CHANGE!r}."
        )
    key = config.get("unique_key")
    if key is None or key == [] or key == "":
        columns: Tuple[str, ...] = ()
    elif isinstance(key, str):
        columns = (key.strip(),)
    elif isinstance(key, (list, tuple)) and all(isinstance(k, str) and k.strip() for k in key):
        columns = tuple(k.strip() for k in key)
    else:
        raise ConfigError(
            f"Model {model}: config unique_key = {key!r} is not a column name or a list of "
            "column names. Name the model's output columns that identify a row, e.g. "
            "unique_key='id' or unique_key=['id', 'day']."
        )
    return mode.strip().lower(), columns
