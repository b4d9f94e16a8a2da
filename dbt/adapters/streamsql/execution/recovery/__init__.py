"""Recovery: what a step does when the past it needs is not there.

schema.py handles a changed input or model schema, lost_history.py rebuilds a model whose inputs'
history was vacuumed or rewritten, retention.py keeps the history a model still needs.
"""
