"""The configs of an incremental_view model, declared once: what each is, and how it is read.

`MODEL_CONFIGS` declares every config a step obeys: its name, its type and default as the docs
table shows them (docs/configuration.md's table is checked against it by a unit test), when a
change to it takes effect, and for the configs the step reads itself, the `ModelSettings` field
it sets and the function that parses and checks its value. `model_settings` builds the model as
a step sees it from dbt's config with them; a value a step cannot obey fails the model before
the step reads anything, with the model, the config and the fix named.

No config may be silently ignored. dbt itself handles `DBT_OWN` whatever the materialization.
Any other key an incremental_view model carries is either a dbt or dbt-spark config this
materialization does not apply (`NOT_APPLIED`, warned about when it is set to something other
than its default) or a key nobody reads, most likely a misspelling (warned about, with the
nearest known name).
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from dbt.adapters.streamsql.execution.errors import StepError
from dbt.adapters.streamsql.execution.event_time.lateness import KEEP_FOREVER
from dbt.adapters.streamsql.execution.model import ModelSettings
from dbt.adapters.streamsql.execution.recovery.retention import interval_seconds


class ConfigError(StepError):
    """A config value the step cannot obey; the message names the model, config and fix."""


ON_SCHEMA_CHANGE = ("ignore", "fail", "append_new_columns", "sync_all_columns")
# dbt's default for incremental models, and the value dbt gives the config when it is not set.
DEFAULT_ON_SCHEMA_CHANGE = "ignore"
STRATEGIES = ("auto", "incremental", "recompute")

# When a change to a config takes effect (docs/configuration.md, "When a config change takes
# effect").
NEXT_STEP = "next step"
TABLE_CREATED = "table created"  # on the first run and on `dbt run --full-refresh`
TABLE_BUILT = "table built"  # only then: a change later fails the step
SCHEMA_CHANGE = "schema change"  # at the next step whose query's columns differ
DBT = "dbt"  # dbt applies it, as for any materialization


def _as_is(model: str, name: str, value: Any) -> Any:
    return value


def _boolean(model: str, name: str, value: Any) -> bool:
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ConfigError(
        f"Model {model}: config {name} = {value!r} is not a boolean. Use true or false."
    )


def _boolean_on(model: str, name: str, value: Any) -> bool:
    """A boolean that is true unless set."""
    return True if value is None else _boolean(model, name, value)


def _names(model: str, name: str, value: Any) -> Tuple[str, ...]:
    """A column name or a list of them."""
    if value is None or value == [] or value == "":
        return ()
    if isinstance(value, str):
        return (value.strip(),)
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) and v.strip() for v in value):
        return tuple(v.strip() for v in value)
    raise ConfigError(
        f"Model {model}: config {name} = {value!r} is not a column name or a list of "
        f"column names. Name the model's output columns, e.g. {name}='id' or "
        f"{name}=['id', 'day']."
    )


def _column_map(model: str, name: str, value: Any) -> Dict[str, Any]:
    """A map of output column -> constant expression (lateness, max_future, watermark)."""
    if value is None or value == {}:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"Model {model}: config {name} = {value!r} is not a map of the model's output "
            f"columns to constant expressions. Write it as a map, e.g. "
            f"{name}={{'ts': 'INTERVAL 1 HOUR'}}."
        )
    return dict(value)


def _string_map(model: str, name: str, value: Any) -> Dict[str, str]:
    if value is None or value == {}:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"Model {model}: config {name} = {value!r} is not a map of names to values. "
            f"Write it as a map, e.g. {name}={{'delta.logRetentionDuration': 'interval 60 days'}}."
        )
    return dict(value)


def _one_of(
    choices: Sequence[str], default: str, whose: str = ""
) -> Callable[[str, str, Any], str]:
    def parse(model: str, name: str, value: Any) -> str:
        chosen = default if value is None or value == "" else value
        if not isinstance(chosen, str) or chosen.strip().lower() not in choices:
            raise ConfigError(
                f"Model {model}: config {name} = {chosen!r} is not one of "
                f"{', '.join(choices)}{whose}. Use one of them; the default is {default!r}."
            )
        return chosen.strip().lower()

    return parse


def _location_root(model: str, name: str, value: Any) -> Optional[str]:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ConfigError(
            f"Model {model}: config {name} = {value!r} is not a path. Use a directory URI, "
            "e.g. s3a://lake/views."
        )
    return f"{value.rstrip('/')}/{model}"


def _retention(default: Optional[str]) -> Callable[[str, str, Any], Optional[float]]:
    """A retention: an interval ("30 days", "interval 12 hours"), or `forever`; in seconds, None
    for ever."""

    def parse(model: str, name: str, value: Any) -> Optional[float]:
        chosen = default if value is None or value == "" else value
        if chosen is None or (isinstance(chosen, str) and chosen.strip().lower() == KEEP_FOREVER):
            return None
        seconds = interval_seconds(str(chosen)) if isinstance(chosen, str) else None
        if seconds is None or seconds < 0:
            # `none` could mean "keep none" as well as "no retention": neither is guessed
            raise ConfigError(
                f"Model {model}: config {name} = {chosen!r} is not a retention. Write an "
                f"interval in seconds, minutes, hours, days or weeks (e.g. {name}='30 days' or "
                f"'interval 12 hours'; '0 seconds' keeps no row past the next clean-up), or "
                f"'{KEEP_FOREVER}' to keep every row."
            )
        return seconds

    return parse


def _final_state(model: str, name: str, value: Any) -> Dict[str, Any]:
    """final_state_retention: a map of lateness column -> constant expression or `forever`, or
    one of those for every lateness column (under the key "*")."""
    if value is None or value == "" or value == {}:
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return {"*": str(value)}
    raise ConfigError(
        f"Model {model}: config {name} = {value!r} is neither a map of lateness columns to "
        f"constant expressions nor one expression. Write e.g. {name}={{'ts': 'INTERVAL 1 DAY'}}, "
        f"or {name}='forever' to keep the state of every group."
    )


@dataclass(frozen=True)
class ConfigSpec:
    """One config an incremental_view model obeys."""

    name: str
    type: str  # as the docs table's `type` column shows it
    default: str  # as the docs table's `default` column shows it ("" for none)
    takes_effect: str  # NEXT_STEP, TABLE_CREATED, TABLE_BUILT, SCHEMA_CHANGE or DBT
    # The `ModelSettings` field the config sets, and how its value is read and checked;
    # None: dbt applies the config itself (hooks, docs, full_refresh).
    field: Optional[str] = None
    parse: Callable[[str, str, Any], Any] = _as_is


LIST = "string or list of strings"
COLUMN_MAP = "map: column -> constant expression"
RETENTION = "interval, or `forever`"

# Every config incremental_view obeys, in the order of the docs table.
MODEL_CONFIGS: Tuple[ConfigSpec, ...] = (
    ConfigSpec("materialized", "string", "", DBT),
    ConfigSpec("lateness", COLUMN_MAP, "none", NEXT_STEP, "lateness", _column_map),
    ConfigSpec("max_future", COLUMN_MAP, "none", NEXT_STEP, "max_future", _column_map),
    ConfigSpec(
        "final_state_retention",
        f"{COLUMN_MAP} or `forever`, or one for all",
        "the column's `lateness`",
        NEXT_STEP,
        "final_state_retention",
        _final_state,
    ),
    ConfigSpec("watermark", COLUMN_MAP, "none", NEXT_STEP, "watermark", _column_map),
    ConfigSpec("emit_final", "boolean", "`false`", TABLE_BUILT, "emit_final", _boolean),
    ConfigSpec(
        "strategy",
        ", ".join(f"`{s}`" for s in STRATEGIES),
        "`auto`",
        NEXT_STEP,
        "strategy",
        _one_of(STRATEGIES, "auto"),
    ),
    ConfigSpec("append_only", "boolean", "`false`", NEXT_STEP, "append_only", _boolean),
    ConfigSpec("partition_by", LIST, "none", TABLE_CREATED, "partition_by", _names),
    ConfigSpec("liquid_clustered_by", LIST, "none", TABLE_CREATED, "cluster_by", _names),
    ConfigSpec(
        "tblproperties",
        "map: string -> string",
        "none",
        TABLE_CREATED,
        "tblproperties",
        _string_map,
    ),
    ConfigSpec("location_root", "string", "none", TABLE_CREATED, "location", _location_root),
    ConfigSpec(
        "on_schema_change",
        ", ".join(f"`{s}`" for s in ON_SCHEMA_CHANGE),
        f"`{DEFAULT_ON_SCHEMA_CHANGE}`",
        SCHEMA_CHANGE,
        "on_schema_change",
        _one_of(ON_SCHEMA_CHANGE, DEFAULT_ON_SCHEMA_CHANGE, " (dbt's values)"),
    ),
    ConfigSpec("unique_key", LIST, "none", NEXT_STEP, "unique_key", _names),
    ConfigSpec(
        "waterline_retention",
        RETENTION,
        "`30 days`",
        NEXT_STEP,
        "waterline_retention",
        _retention("30 days"),
    ),
    ConfigSpec(
        "pending_retention",
        RETENTION,
        "`30 days`",
        NEXT_STEP,
        "pending_retention",
        _retention("30 days"),
    ),
    ConfigSpec("compact_files", "boolean", "`true`", NEXT_STEP, "compact_files", _boolean_on),
    ConfigSpec(
        "rewrite_when_small",
        "boolean",
        "`true`",
        NEXT_STEP,
        "rewrite_when_small",
        _boolean_on,
    ),
    ConfigSpec("full_refresh", "boolean", "none", DBT),
    ConfigSpec("pre_hook", "SQL", "none", DBT),
    ConfigSpec("post_hook", "SQL", "none", DBT),
    ConfigSpec("persist_docs", "map", "none", DBT),
)
CONFIGS_BY_NAME = {spec.name: spec for spec in MODEL_CONFIGS}

# The configs a step obeys, with the spellings dbt also accepts for the hooks.
OBEYED = set(CONFIGS_BY_NAME) | {"pre-hook", "post-hook", "file_format"}


def model_settings(
    name: str, schema: str, config: Mapping[str, Any], full_refresh: bool
) -> ModelSettings:
    """The model `schema.name` as a step sees it: its table and the configs it obeys.

    Raises:
        ConfigError: a config has a value the step cannot obey.
    """
    fields = {
        spec.field: spec.parse(name, spec.name, config.get(spec.name))
        for spec in MODEL_CONFIGS
        if spec.field is not None
    }
    return ModelSettings(
        name=name, schema=schema, identifier=name, full_refresh=full_refresh, **fields
    )


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

    The adapter's `StreamSQLConfig` (impl.py) adds no others: a unit test checks it."""
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
