"""The starter `streamsql init` puts into the project `dbt init` made, in place of dbt's example.

dbt's own starter (models/example: a table with a NULL id that its not_null test fails, and a
view over it) shows nothing of this adapter, and `dbt build` fails on it by design. The starter
here is a seed and an incremental view over it with LATENESS, and tests that pass: `dbt build`
in the new project seeds, takes the view's first step and checks it against its recompute.
dbt-core copies its starter itself (an adapter cannot give it another), so `streamsql init` runs
`dbt init` and then writes these files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List

# dbt's example, removed when it is as dbt wrote it
DBT_EXAMPLE = Path("models") / "example"
DBT_EXAMPLE_FILES = {"my_first_dbt_model.sql", "my_second_dbt_model.sql", "schema.yml"}

STARTER: Dict[str, str] = {
    "seeds/pickups.csv": """\
ts,location
2020-01-01 00:00:00,home
2020-01-01 01:00:00,office
2020-01-01 00:10:00,shop
2020-01-01 02:00:00,home
2020-01-01 00:20:00,friend
""",
    "seeds/pickups.yml": """\
version: 2
seeds:
  - name: pickups
    description: Pickups as they arrive; `dbt seed` loads them as a Delta table.
    config:
      column_types: {ts: timestamp, location: string}
""",
    "models/pickups_per_hour.sql": """\
-- An incremental view: every `dbt run` is one step, which applies to the table only what
-- changed in its inputs since the step before. LATENESS: a change more than an hour behind
-- the newest hour seen is not applied but kept in pickups_per_hour__late, and
-- pickups_per_hour__waterline records how far the hour has moved (dbt-streamsql's
-- docs/lateness-and-watermark.md).
{{ config(materialized='incremental_view', lateness={'hour': 'INTERVAL 1 HOUR'}) }}

select date_trunc('hour', ts) as hour, count(*) as pickups
from {{ ref('pickups') }}
group by date_trunc('hour', ts)
""",
    "models/pickups_per_hour.yml": """\
version: 2
models:
  - name: pickups_per_hour
    description: Pickups per hour, kept up to date step by step.
    data_tests:
      # the table holds what the query gives over its inputs, but what LATENESS set aside
      - matches_recompute
    columns:
      - name: hour
        data_tests: [not_null, unique]
""",
}


class StarterError(Exception):
    """The starter cannot be written without overwriting a file of the project."""


def write_starter(project: Path) -> List[str]:
    """Writes STARTER into `project`, after removing dbt's example when it is as dbt wrote it;
    the paths written, relative to the project.

    Raises:
        StarterError: a file of the starter is there already (nothing is written then).
    """
    there = [name for name in STARTER if (project / name).exists()]
    if there:
        raise StarterError(
            f"{project} has {', '.join(there)} already: the starter would overwrite it. Nothing "
            "was written; move the file away, or write your own models instead."
        )
    example = project / DBT_EXAMPLE
    if example.is_dir() and {p.name for p in example.iterdir()} == DBT_EXAMPLE_FILES:
        for name in sorted(DBT_EXAMPLE_FILES):
            (example / name).unlink()
        example.rmdir()
    for name, text in STARTER.items():
        path = project / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return list(STARTER)
