"""The commit protocol: how a step's writes become durable exactly once.

writes.py names the writes (the data types only), record.py the step record stored in the model's
commit, transactions.py the Delta transaction ids and commit metadata around each write,
protocol.py the write order, side_tables.py the side tables' SQL, history.py reads the model's
history back (the last step, unfinished side writes), tables.py creates and compacts the tables.
"""
