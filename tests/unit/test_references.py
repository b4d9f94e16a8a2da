from dbt.adapters.streamsql.planning.references import referenced_tables


def test_tables_not_ctes_nor_table_functions():
    sql = """
        with __dbt__cte__x as (select * from `demo`.`a`)
        select * from __dbt__cte__x join spark_catalog.Demo.b b on true, (select 1 from demo.c) q
        cross join range(5) r
        where exists (select 1 from demo.d)
    """
    assert sorted(referenced_tables(sql)) == ["demo.a", "demo.b", "demo.c", "demo.d"]


def test_window_first_in_group_by_still_parses():
    sql = (
        "select window(ts, '1 hour').start as w, count(*) from demo.e group by window(ts, '1 hour')"
    )
    assert referenced_tables(sql) == ["demo.e"]
