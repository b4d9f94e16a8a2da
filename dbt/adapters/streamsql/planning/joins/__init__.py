"""The delta rules of the joins in a SELECT block's FROM clause (linear.py runs them).

- kinds.py: which rule a join takes, its name in a plan's reason, its equi-join keys;
- inner.py: the terms of a block's chain of joins, inner and cross joins by telescoping (or by
  inclusion-exclusion over new versions), with key bounds on the sources a term reads whole;
- keyed.py: LEFT/RIGHT/FULL equi-joins, semi and anti joins (IN, EXISTS, NOT EXISTS) and NOT IN,
  re-evaluated for the keys a change touches, and the FROM clause of a term with its restrictions.
"""
