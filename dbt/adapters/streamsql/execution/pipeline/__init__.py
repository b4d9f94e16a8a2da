"""The step pipeline: inputs, plan choice, change, write.

step.py runs a step from end to end and is the only module that knows the order; inputs.py
reads what changed in each input, plan_choice.py chooses between the incremental plan and a
recompute, change.py computes the view's signed change, aggregate_state.py reads and writes an
aggregate's state, keys.py and bounds.py give MERGE its keys and literal key bounds.
"""
