"""The step pipeline: inputs, plan choice, change, write.

step.py runs a step from end to end and is the only module that knows the order (an entry point,
above the rest of this room); inputs.py reads what changed in each input, plan_choice.py chooses
between the incremental plan and a recompute, change.py computes the view's signed change (an
aggregate's state: commit/aggregate_state.py), keys.py gives MERGE its keys.
"""
