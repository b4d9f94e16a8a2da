"""What every layer of the executor passes around: the data types of a model and its step.

model.py is the model's settings, every config declared once as a field (config_kinds.py: the
kinds of value; configs.py: what the declarations give); input_state.py the inputs as a step
reads them; writes.py what a step writes, as data; lateness_rule.py a LATENESS rule; result.py
what a step reports; errors.py its errors; intervals.py intervals as configs write them. The
step's context (../context.py), its state (../step_state.py) and its record (../commit/record.py)
belong here too and are to move here. These sit on the engine (a context holds its SQL session,
an input's change its Delta commits) and import nothing else of execution/.
"""
