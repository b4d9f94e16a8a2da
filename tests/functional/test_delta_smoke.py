"""The Delta jars and SQL extensions are really there: MERGE and the change feed on a dbt table."""

import pytest
from dbt.tests.util import run_dbt

MODEL = """
{{ config(materialized='table') }}
select 1 as id, 'a' as label union all select 2, 'b'
"""


class TestDeltaSmoke:
    @pytest.fixture(scope="class")
    def models(self):
        return {"letters.sql": MODEL}

    def test_merge_and_change_feed(self, project):
        run_dbt(["run"])
        table = f"{project.test_schema}.letters"
        provider = project.run_sql(f"describe extended {table}", fetch="all")
        assert any(row[0] == "Provider" and row[1] == "delta" for row in provider)
        feed = project.run_sql(
            f"show tblproperties {table} ('delta.enableChangeDataFeed')", fetch="one"
        )
        assert feed[1] == "true"

        project.run_sql(f"""
            merge into {table} t
            using (select 2 as id, 'B' as label union all select 3, 'c') s on t.id = s.id
            when matched then update set label = s.label
            when not matched then insert *
        """)
        changes = project.run_sql(
            f"select id, label, _change_type from table_changes('{table}', 1) order by id, "
            "_change_type",
            fetch="all",
        )
        assert [tuple(row) for row in changes] == [
            (2, "B", "update_postimage"),
            (2, "b", "update_preimage"),
            (3, "c", "insert"),
        ]
