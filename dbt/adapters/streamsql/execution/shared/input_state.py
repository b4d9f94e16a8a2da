"""The model's inputs as a step reads them: each table at its version (`InputState`), and what
changed in it since the last step (`InputChange`). pipeline/inputs.py finds and reads them;
recovery/ and commit/ judge and describe them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Mapping, Optional, Tuple

from dbt.adapters.streamsql.execution.engine.delta_log import Commit
from dbt.adapters.streamsql.planning.plan import InputTable


@dataclass
class InputState:
    """One table the model reads, as this step reads it: its columns and the version read."""

    table: InputTable
    relation: str  # quoted name to use in SQL
    version: int
    table_id: str = ""
    size_bytes: Optional[int] = None  # its data files' size at `version`, when known
    properties: Mapping[str, str] = field(default_factory=dict)  # its Delta table properties


@dataclass
class InputChange:
    """What changed in one input since the last step, as far as its log tells."""

    input: InputState
    before: Optional[int]  # the version the last step read up to; None: never read
    rows: Optional[int] = None  # rows of the change feed; None: the log cannot tell
    removals: Optional[int] = None  # of which remove a row (a delete, an update's old row)
    commits: Optional[List[Commit]] = None  # its commits since `before`, as its log has them
    size_bytes: Optional[int] = None  # bytes of data files its commits added and removed
    # (version, operation) of the commits that replaced the table in place since `before`, when
    # its change feed is read across them (recovery/faults.py): all its rows out and in again
    replaced: List[Tuple[int, str]] = field(default_factory=list)
    # Whether a commit since `before` overwrote the table (an INSERT OVERWRITE, such as a step's
    # rewrite of a small model, commit/protocol.py): its feed has every row out and in again
    rewritten: bool = False
