"""Access to Spark and Delta: everything that sends SQL or reads a Delta log.

sql_session.py is the one interface the executor talks to, delta_log.py reads versions, history
and the change feed, statements.py and views.py write SQL text, bindings.py binds literal values,
trace.py records each statement with its role and time.
"""
