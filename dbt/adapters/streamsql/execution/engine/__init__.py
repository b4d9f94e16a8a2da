"""Access to Spark and Delta: everything that sends SQL or reads a Delta log.

sql_session.py is the one interface the executor talks to, delta_log.py reads versions, history
and the change feed, statements.py and views.py write SQL text, side_tables.py the side tables'
statements (from macros), bindings.py binds literal values, trace.py records each statement with
its role and time. Nothing here imports the rest of execution/: this is the bottom layer.
"""
