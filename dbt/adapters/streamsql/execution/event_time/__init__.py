"""Event time: LATENESS, WATERMARK and emit_final as Feldera defines them.

rules.py derives a model's rules from its configs and its inputs', lateness.py finds late rows
and quarantines them, watermark.py holds rows until the watermark passes them, emit_final.py
emits a window's rows once, when it closes.
"""
