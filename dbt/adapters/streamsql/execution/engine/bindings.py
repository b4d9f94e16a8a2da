"""The relations a step's placeholders stand for, realized only when a statement uses them.

A plan refers to the inputs (and stages, state, target) only through placeholders (plan.py). The
step defines what each one stands for and how to make it readable:

- `INLINE`: the SELECT is written into each statement that reads it (no statement of its own):
  an input as of its current version, a change read once;
- `VIEW`: a temporary view, created once: an input as of an older version (Delta rebuilds that
  version's file list when a statement is planned over it, so once per step, not per statement);
- `MATERIALIZED`: computed now, once (`StepViews.materialize`): a change read several times.

`bind` realizes what a statement's SQL uses, the first time it is used, and substitutes it: a
placeholder no statement of the step reads costs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Mapping, Optional

from dbt.adapters.streamsql.execution.engine import statements as sql
from dbt.adapters.streamsql.execution.engine.views import StepViews

INLINE, VIEW, MATERIALIZED = "inline", "view", "materialized"


@dataclass(frozen=True)
class Relation:
    label: str  # the view's name within the step (StepViews), e.g. "old_0"
    select: str
    how: str = INLINE
    role: Optional[str] = None  # what it holds, for the statement log (trace.py)


class Bindings:
    def __init__(self, views: StepViews) -> None:
        self.views = views
        self._defined: Dict[str, Relation] = {}
        self._bound: Dict[str, str] = {}  # placeholder -> the text that replaces it

    def define(
        self,
        placeholder: str,
        label: str,
        select: str,
        how: str = INLINE,
        role: Optional[str] = None,
    ) -> None:
        """What `placeholder` stands for; made readable on first use (`bind`)."""
        self._bound.pop(placeholder, None)
        self._defined[placeholder] = Relation(label, select, how, role)

    def set(self, placeholder: str, text: str) -> None:
        """`placeholder` stands for `text` as it is (a view's name, a literal predicate)."""
        self._defined.pop(placeholder, None)
        self._bound[placeholder] = text

    def __contains__(self, placeholder: str) -> bool:
        return placeholder in self._bound or placeholder in self._defined

    def relation(self, placeholder: str) -> str:
        """The text that stands for `placeholder`, realizing it if it is not yet."""
        if placeholder not in self._bound:
            defined = self._defined.get(placeholder)
            if defined is None:
                raise KeyError(f"the plan refers to {placeholder}, which this step did not bind")
            if defined.how == MATERIALIZED:
                text = self.views.materialize(defined.label, defined.select, defined.role)
            elif defined.how == VIEW:
                text = self.views.view(defined.label, defined.select, defined.role)
            else:
                text = f"({defined.select})"
            self._bound[placeholder] = text
        return self._bound[placeholder]

    def reads(self, text: str) -> str:
        """What the inline relations `text` refers to read (their roles), for the role of the
        statement they are written into: "" when none has a role."""
        roles = []
        for placeholder in dict.fromkeys(sql.placeholder_occurrences(text)):
            defined = self._defined.get(placeholder)
            if defined is not None and defined.how == INLINE and defined.role:
                roles.append(defined.role)
        return "; ".join(roles)

    def bind(self, text: str, local: Optional[Mapping[str, str]] = None) -> str:
        """`text` with every placeholder replaced, `local` ones (a state view, ...) first."""
        local = dict(local or {})

        def replace(name: str) -> str:
            return local[name] if name in local else self.relation(name)

        return sql.replace_placeholders(text, replace)
