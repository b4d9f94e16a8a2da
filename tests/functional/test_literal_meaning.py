"""What a model says is what its view holds: the planner's reading of Spark SQL asked of Spark.

The planner parses a model's SQL and renders the SQL it runs from the tree, so a literal that
sqlglot reads differently from Spark's own parser would change the view's rows without an
error (`'O''Brien'` was once read as 'O' 'Brien', i.e. OBrien). The first test renders every
literal form Spark SQL has through the planner's parser and asks Spark for both values; the
others run models with such literals as real dbt steps, and one where a session setting makes
Spark read the SQL unlike the planner (ANSI double-quoted identifiers), which the meaning check
(execution/pipeline/meaning.py) must send to the recompute instead of a wrong result.
"""

from __future__ import annotations

from collections import Counter

import pytest
from dbt.tests.util import run_dbt

from dbt.adapters.streamsql.planning.binding import parse_query
from dbt.adapters.streamsql.planning.errors import RecomputeRequired
from dbt.adapters.streamsql.planning.plan import DIALECT
from tests.differential import as_bag, values_clause

# Each form stands alone as a SELECT's one expression.
FORMS = [
    # doubled quotes, backslashes and their mixes
    "'O''Brien'",
    "'%''%'",
    "'a''b''c'",
    "''''",
    "'''a'",
    "''",
    '"a""b"',
    '"it\'s"',
    "'a\\\\''b'",
    "'it\\'s'",
    "'\\''",
    "'\\\"'",
    '"\\""',
    "'back\\\\slash'",
    "'\\\\'",
    "'\\\\d+'",
    # escape sequences: named, unknown, octal, unicode
    "'\\n'",
    "'\\t'",
    "'\\r\\n'",
    "'\\b'",
    "'\\Z'",
    "'\\0'",
    "'\\d'",
    "'\\z'",
    "'\\ '",
    "'\\%'",
    "'\\_'",
    "'%\\_%'",
    "'\\101'",
    "'\\200'",
    "'\\377'",
    "'\\400'",
    "'\\x41'",
    "'\\u0041'",
    "'\\u00e9'",
    "'\\uD83D\\uDE00'",
    "'\\U0001F600'",
    "'a\\\nb'",
    "'line\nbreak'",
    "'tab\tin'",
    # adjacent literals, comments between and inside
    "'a' 'b'",
    "'a' \"b\"",
    "'a' -- c\n 'b'",
    "'a' /* c */ 'b'",
    "'a' /* '' */ || 'b'",
    "'--not a comment'",
    "'/* nope */'",
    "'--' || '/*'",
    # unicode, substitution markers
    "'é中😀'",
    "'é' || 'ü'",
    "'${spark.app.name}'",
    "'$x'",
    "'\\${spark.app.name}'",
    # raw and binary strings
    "r'a\\nb'",
    "R'a\\\\b'",
    'r"a\'b"',
    "R'\\n'",
    "X'0A1B'",
    "x'ff'",
    "x''",
    # numbers: suffixes, exponents, ranges, 38 digits
    "1L",
    "1S",
    "1Y",
    "1D",
    "1F",
    "5.D",
    "1.F",
    "1BD",
    "1.5BD",
    "1.0E0BD",
    "1.23e4BD",
    "1e10",
    "1E-5",
    ".5",
    ".5e1",
    "1.",
    "-0.0",
    "0.0D",
    "1e-400",
    "2147483648",
    "9223372036854775807",
    "9223372036854775808",
    "123456789012345678901",
    "12345678901234567890123456789012345678",
    # typed literals, intervals, special values
    "DATE '2020-01-01'",
    "DATE '0001-01-01'",
    "DATE '9999-12-31'",
    "TIMESTAMP '2020-01-01 00:00:00+05:00'",
    "TIMESTAMP_NTZ '9999-12-31 23:59:59'",
    "TIMESTAMP_LTZ '2020-01-01 00:00:00'",
    "INTERVAL '1' HOUR",
    "INTERVAL 2 DAYS",
    "INTERVAL '-1' DAY",
    "INTERVAL 1 YEAR 2 MONTH",
    "INTERVAL '1 day 2 hours'",
    "INTERVAL '1 2:03' DAY TO MINUTE",
    "CAST('NaN' AS DOUBLE)",
    "double('Infinity')",
    "float('-Infinity')",
    "TRUE",
    "NULL",
    # literals where their value is used
    "'a' LIKE 'a\\%'",
    "'a_b' LIKE 'a\\_b'",
    "'ab' LIKE 'a!%' ESCAPE '!'",
    "'a1' RLIKE '\\\\d'",
    "regexp_replace('a1', '\\\\d', 'x')",
    "regexp_replace('a1', '\\d', 'x')",
    "date_format(TIMESTAMP '2020-01-01 00:00:00', 'yyyy-MM-dd HH:mm')",
    "to_date('01/02/2020', 'MM/dd/yyyy')",
    "split('a,b', ',')",
    "str_to_map('a:1,b:2')['b']",
    "map('k''s', 'v')['k''s']",
    "named_struct('a', 1).a",
    "array(1, 2)[0]",
    "CAST(1 AS DECIMAL(38, 0))",
    "typeof(1.5)",
    "typeof(1e0)",
]

# Forms asked of Spark per query.
CHUNK = 12

# Forms Spark itself refuses (so no model can carry them) or sqlglot cannot read (the planner
# then recomputes: RecomputeRequired).
REFUSED_BY_SPARK = [
    "1e309",
    "128Y",
    "N'nat'",
    "0x1F",
    "99999999999999999999999999999999999999.5",  # 39 digits
    "0.000000000000000000000000000000000000001",
]
UNREAD_BY_SQLGLOT = ["'a' r'b'", "r'a''b'"]


@pytest.fixture(scope="module")
def spark(small_spark):
    return small_spark


def rendered(form: str) -> str:
    """The form as the planner writes it back: parsed as the planner parses a model."""
    return parse_query(f"SELECT {form} AS v").selects[0].unalias().sql(DIALECT)


def test_every_literal_form_means_to_the_planner_what_it_means_to_spark(spark):
    written = {form: rendered(form) for form in FORMS}
    differing = []
    for start in range(0, len(FORMS), CHUNK):  # a query of every form overflows Spark's stack
        chunk = FORMS[start : start + CHUNK]
        checks = ", ".join(
            f"typeof(o{i}.v) = typeof(r{i}.v) AND o{i}.v <=> r{i}.v AS same{i}"
            for i in range(len(chunk))
        )
        sources = ", ".join(
            f"(SELECT {form} AS v) AS o{i}, (SELECT {written[form]} AS v) AS r{i}"
            for i, form in enumerate(chunk)
        )
        row = spark.sql(f"SELECT {checks} FROM {sources}").collect()[0]
        differing += [
            (form, written[form], spark.sql(f"SELECT {form}").collect()[0][0])
            for i, form in enumerate(chunk)
            if row[f"same{i}"] is not True
        ]
    assert not differing, differing
    # the forms that prompted this test: one value each, not a CONCAT of two
    assert written["'O''Brien'"] == "'O\\'Brien'"
    assert written['"a""b"'] == "'a\"b'"


@pytest.mark.parametrize("form", REFUSED_BY_SPARK)
def test_a_form_spark_refuses_can_be_in_no_model(spark, form):
    with pytest.raises(Exception):
        spark.sql(f"SELECT {form} AS v").collect()


@pytest.mark.parametrize("form", UNREAD_BY_SQLGLOT)
def test_a_form_sqlglot_cannot_read_is_recomputed(form):
    with pytest.raises(RecomputeRequired):
        rendered(form)


# -- models over hostile values ------------------------------------------------------------------

SOURCES_YML = """
version: 2
sources:
  - name: raw
    schema: "{{ target.schema }}"
    tables:
      - name: names
"""

QUOTED = """
{{ config(materialized='incremental_view') }}
select id, s from {{ source('raw', 'names') }} where s like '%''%' or s = "a""b"
"""

TAGGED = """
{{ config(materialized='incremental_view') }}
select case when s = 'O''Brien' then 'it''s him' when s like '%\\\\\\\\%' then 'back\\\\slash'
            else "other""s" end as tag,
       count(*) as n
from {{ source('raw', 'names') }}
group by 1
"""

# With ANSI mode and spark.sql.ansi.doubleQuotedIdentifiers Spark reads "s" as the column s;
# sqlglot reads a string. The fast path would write the text 's' into every row; the check sends
# the model to the recompute, which runs the SQL as written.
DOUBLE_QUOTED = """
{{ config(
    materialized='incremental_view',
    pre_hook=["set spark.sql.ansi.enabled=true", "set spark.sql.ansi.doubleQuotedIdentifiers=true"],
    post_hook=["reset spark.sql.ansi.doubleQuotedIdentifiers", "set spark.sql.ansi.enabled=false"],
) }}
select id, "s" as picked from {{ source('raw', 'names') }}
"""

ROWS = [
    (1, "O'Brien"),
    (2, "%'%"),
    (3, 'a"b'),
    (4, "back\\slash"),
    (5, "plain"),
    (6, "it''s"),
    (7, None),
]
LATER_ROWS = [(8, "x%'y"), (9, 'a"b')]


def bag(project, sql: str) -> Counter:
    return as_bag(project.run_sql(sql, fetch="all"))


def _response(results, name: str):
    found = [r for r in results if r.node.name == name]
    assert len(found) == 1, [r.node.name for r in results]
    return found[0].adapter_response


class TestModelsOverHostileLiterals:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "quoted.sql": QUOTED,
            "tagged.sql": TAGGED,
            "double_quoted.sql": DOUBLE_QUOTED,
            "sources.yml": SOURCES_YML,
        }

    def test_each_step_holds_what_the_query_means(self, project):
        schema = project.test_schema
        names = f"{schema}.names"
        project.run_sql(f"create table {names} (id int, s string) using delta")
        project.run_sql(f"alter table {names} set tblproperties (delta.enableChangeDataFeed=true)")
        changes = [
            f"insert into {names} values {values_clause(ROWS)}",
            f"delete from {names} where id in (2, 5)",
            f"update {names} set s = 'O''Brien' where id = 6",
            f"insert into {names} values {values_clause(LATER_ROWS)}",
        ]
        expected = dict(ROWS)
        for number, change in enumerate(changes, start=1):
            project.run_sql(change)
            if number == 2:
                expected.pop(2), expected.pop(5)
            elif number == 3:
                expected[6] = "O'Brien"
            elif number == 4:
                expected.update(dict(LATER_ROWS))
            results = run_dbt(["run"])

            quoted = {
                (i, s) for i, s in expected.items() if s is not None and ("'" in s or s == 'a"b')
            }
            assert bag(project, f"select id, s from {schema}.quoted") == Counter(quoted)
            assert _response(results, "quoted")["plan"] == "linear", number

            tags = Counter(
                "it's him" if s == "O'Brien" else "back\\slash" if s and "\\" in s else 'other"s'
                for s in expected.values()
            )
            assert bag(project, f"select tag, n from {schema}.tagged") == Counter(tags.items())
            assert _response(results, "tagged")["plan"] == "aggregate", number

            picked = bag(project, f"select id, picked from {schema}.double_quoted")
            assert picked == Counter(expected.items()), number
            response = _response(results, "double_quoted")
            assert response["plan"] == "recompute", response
            assert "literal" in response["reason"], response
