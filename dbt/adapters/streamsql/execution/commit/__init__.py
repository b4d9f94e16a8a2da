"""The commit protocol: how a step's writes become durable exactly once, and the tables it keeps.

record.py is the step record stored in the model's commit, transactions.py the Delta transaction
ids and commit metadata around each write, protocol.py the write order (the writes themselves are
data: shared/writes.py), history.py reads the model's history back (the last step, unfinished
side writes), tables.py creates and compacts the tables, aggregate_state.py reads an aggregate's
state for the groups a step changes, bounds.py bounds state reads and MERGEs by key ranges.
"""
