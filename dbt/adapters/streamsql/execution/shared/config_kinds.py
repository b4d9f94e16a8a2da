"""How a model config is declared: the kinds of value configs take, and `setting`.

A config is declared once, as a field of `ModelSettings` (model.py) whose default is
`setting(...)`. The declaration says the config's name (the field's, unless it says another),
its kind of value, its default as a user would write it, when a change to it takes effect and,
in one line, what it does. A kind (`ValueKind`) says how the docs table names the type, the type
dbt's config class gives the config, and the parser that reads and checks a value.

configs.py derives the rest from the declarations: the list of configs in the docs' order (and
docs/configuration.md's table is checked against it), the fields of dbt's config class
(impl.StreamSQLConfig), how `ModelSettings` is read from dbt's config, and the warnings about
configs nobody reads.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Type, Union

from dbt.adapters.streamsql.execution.shared.errors import StepError
from dbt.adapters.streamsql.execution.shared.intervals import KEEP_FOREVER, interval_seconds


class ConfigError(StepError):
    """A config value the step cannot obey; the message names the model, config and fix."""


# When a change to a config takes effect (docs/configuration.md, "When a config change takes
# effect").
NEXT_STEP = "next step"
TABLE_CREATED = "table created"  # on the first run and on `dbt run --full-refresh`
TABLE_BUILT = "table built"  # only then: a change later fails the step
SCHEMA_CHANGE = "schema change"  # at the next step whose query's columns differ
DBT = "dbt"  # dbt applies it, as for any materialization

# How a value is read: (model, config name, the model's value or None when it sets none, the
# declared default) -> the value a step reads. Raises ConfigError, naming the model, the config
# and the fix, for a value the step cannot obey.
Parse = Callable[[str, str, Any, Any], Any]


def _as_is(model: str, name: str, value: Any, default: Any) -> Any:
    return default if value is None else value


def _boolean(model: str, name: str, value: Any, default: Any) -> bool:
    chosen = default if value is None else value
    if chosen is None:
        return False
    if isinstance(chosen, bool):
        return chosen
    if isinstance(chosen, str) and chosen.strip().lower() in ("true", "false"):
        return chosen.strip().lower() == "true"
    raise ConfigError(
        f"Model {model}: config {name} = {chosen!r} is not a boolean. Use true or false."
    )


def _names(model: str, name: str, value: Any, default: Any) -> Tuple[str, ...]:
    """A column name or a list of them."""
    chosen = default if value is None else value
    if chosen is None or chosen == [] or chosen == "":
        return ()
    if isinstance(chosen, str):
        return (chosen.strip(),)
    if isinstance(chosen, (list, tuple)) and all(isinstance(v, str) and v.strip() for v in chosen):
        return tuple(v.strip() for v in chosen)
    raise ConfigError(
        f"Model {model}: config {name} = {chosen!r} is not a column name or a list of "
        f"column names. Name the model's output columns, e.g. {name}='id' or "
        f"{name}=['id', 'day']."
    )


def _column_map(model: str, name: str, value: Any, default: Any) -> Dict[str, Any]:
    """A map of output column -> constant expression (lateness, max_future, watermark)."""
    chosen = default if value is None else value
    if chosen is None or chosen == {}:
        return {}
    if not isinstance(chosen, Mapping):
        raise ConfigError(
            f"Model {model}: config {name} = {chosen!r} is not a map of the model's output "
            f"columns to constant expressions. Write it as a map, e.g. "
            f"{name}={{'ts': 'INTERVAL 1 HOUR'}}."
        )
    return dict(chosen)


def _string_map(model: str, name: str, value: Any, default: Any) -> Dict[str, str]:
    chosen = default if value is None else value
    if chosen is None or chosen == {}:
        return {}
    if not isinstance(chosen, Mapping):
        raise ConfigError(
            f"Model {model}: config {name} = {chosen!r} is not a map of names to values. "
            f"Write it as a map, e.g. {name}={{'delta.logRetentionDuration': 'interval 60 days'}}."
        )
    return dict(chosen)


def _location_root(model: str, name: str, value: Any, default: Any) -> Optional[str]:
    """Where the model's tables go: `<location_root>/<model>`; None: the warehouse's."""
    chosen = default if value is None else value
    if chosen is None or chosen == "":
        return None
    if not isinstance(chosen, str):
        raise ConfigError(
            f"Model {model}: config {name} = {chosen!r} is not a path. Use a directory URI, "
            "e.g. s3a://lake/views."
        )
    return f"{chosen.rstrip('/')}/{model}"


def _retention(model: str, name: str, value: Any, default: Any) -> Optional[float]:
    """A retention: an interval ("30 days", "interval 12 hours"), or `forever`; in seconds, None
    for ever."""
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


def _final_state(model: str, name: str, value: Any, default: Any) -> Dict[str, Any]:
    """final_state_retention: a map of lateness column -> constant expression or `forever`, or
    one of those for every lateness column (under the key "*")."""
    chosen = default if value is None else value
    if chosen is None or chosen == "" or chosen == {}:
        return {}
    if isinstance(chosen, Mapping):
        return dict(chosen)
    if isinstance(chosen, (str, int, float)) and not isinstance(chosen, bool):
        return {"*": str(chosen)}
    raise ConfigError(
        f"Model {model}: config {name} = {chosen!r} is neither a map of lateness columns to "
        f"constant expressions nor one expression. Write e.g. {name}={{'ts': 'INTERVAL 1 DAY'}}, "
        f"or {name}='forever' to keep the state of every group."
    )


@dataclass(frozen=True)
class ValueKind:
    """The values a config takes."""

    docs: str  # as the docs table's `type` column names it
    declared: Any = Any  # the type dbt's config class gives the config (made Optional there)
    parse: Parse = _as_is


BOOLEAN = ValueKind("boolean", bool, _boolean)
COLUMNS = ValueKind("string or list of strings", Union[List[str], str], _names)
COLUMN_MAP = ValueKind("map: column -> constant expression", Dict[str, str], _column_map)
STRING_MAP = ValueKind("map: string -> string", Dict[str, str], _string_map)
LOCATION = ValueKind("string", str, _location_root)
RETENTION = ValueKind("interval, or `forever`", str, _retention)
FINAL_STATE = ValueKind(
    f"{COLUMN_MAP.docs} or `forever`, or one for all", Union[Dict[str, str], str], _final_state
)


def one_of(choices: Sequence[str], whose: str = "") -> ValueKind:
    """One of `choices`, in any case; `whose` follows the list in the error ("(dbt's values)")."""

    def parse(model: str, name: str, value: Any, default: Any) -> str:
        chosen = default if value is None or value == "" else value
        if not isinstance(chosen, str) or chosen.strip().lower() not in choices:
            raise ConfigError(
                f"Model {model}: config {name} = {chosen!r} is not one of "
                f"{', '.join(choices)}{whose}. Use one of them; the default is {default!r}."
            )
        return chosen.strip().lower()

    return ValueKind(", ".join(f"`{choice}`" for choice in choices), str, parse)


@dataclass(frozen=True)
class ConfigSpec:
    """One config an incremental_view model obeys: its one declaration."""

    name: str
    kind: ValueKind
    takes_effect: str  # NEXT_STEP, TABLE_CREATED, TABLE_BUILT, SCHEMA_CHANGE or DBT
    doc: str  # what it does, in words its row in docs/configuration.md's table uses
    default: Any = None  # as a user would write it; None: none
    # The `ModelSettings` field the config sets; None: dbt applies the config itself.
    field: Optional[str] = None
    # The docs table's `default` when it is not `default` written as code ("" for no cell).
    docs_default_text: Optional[str] = None

    @property
    def docs_type(self) -> str:
        """The docs table's `type` of the config."""
        return self.kind.docs

    @property
    def docs_default(self) -> str:
        """The docs table's `default` of the config."""
        if self.docs_default_text is not None:
            return self.docs_default_text
        if self.default is None:
            return "none"
        if isinstance(self.default, bool):
            return "`true`" if self.default else "`false`"
        return f"`{self.default}`"

    def read(self, model: str, value: Any) -> Any:
        """The value a step reads: the model's `value` (None: it sets none), parsed and checked.

        Raises:
            ConfigError: the step cannot obey the value.
        """
        return self.kind.parse(model, self.name, value, self.default)


_SPEC = "streamsql_config"  # the key of a field's declaration in the dataclass field's metadata


def setting(
    kind: ValueKind,
    takes_effect: str,
    doc: str,
    *,
    default: Any = None,
    config: Optional[str] = None,
    docs_default: Optional[str] = None,
) -> Any:
    """Declare a config as a `ModelSettings` field: the field's default is `default` read as
    the step reads it.

    Args:
        kind: the values the config takes (its docs type, its type for dbt, its parser).
        takes_effect: when a change to it takes effect (NEXT_STEP, ...).
        doc: what it does, in one line its docs table row says word for word.
        default: as a user would write it; None: none.
        config: the config's name when it is not the field's.
        docs_default: the docs table's default when it is not `default` written as code.
    """
    spec = ConfigSpec(
        name=config or "",
        kind=kind,
        takes_effect=takes_effect,
        doc=doc,
        default=default,
        docs_default_text=docs_default,
    )
    # read again for each model: two models never share one map
    read_default = functools.partial(kind.parse, "", config or "", None, default)
    return dataclasses.field(default_factory=read_default, metadata={_SPEC: spec})


def declared_configs(settings: Type[Any]) -> Tuple[ConfigSpec, ...]:
    """The configs declared by `settings`'s fields (`setting`), in the fields' order."""
    declared = []
    for field in dataclasses.fields(settings):
        spec = field.metadata.get(_SPEC)
        if spec is not None:
            declared.append(
                dataclasses.replace(spec, name=spec.name or field.name, field=field.name)
            )
    return tuple(declared)
