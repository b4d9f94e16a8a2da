"""Every message the adapter raises to users is in docs/errors.md.

The messages are collected from the code: every `raise X(...)` in dbt/adapters/streamsql/ whose
X is one of `USER_FACING`, and every `exceptions.raise_compiler_error(...)` of the package's
macros. A raise of a variable set from a call (`changed = sql_changed(...)`, then
`raise StepError(changed)`) is read as the strings that function returns. A message's computed
parts (`{...}` of an f-string, `~ ... ~` in Jinja) are wildcards; what is left are its literal
fragments, compared with the doc without backticks, case or runs of whitespace.

A message's key is its first fragment of at least `KEY_WORDS` words, cut to its first
`KEY_LENGTH` words, or longer where another message shares that much (then the first fragment
no other message has decides). docs/errors.md must contain the key. A message without such a
fragment (`injected fault at {point} (step of {model})`) must have all its fragments, in
order, on one line of the doc, where its wildcards stand for the doc's `<m>`, `<c>`, `<v>`.

Raised but not collected, because no user sees their message as an error:
- `RecomputeRequired`: the planner's reason for a recompute plan; users see it as the plan's
  reason on the step line ("recompute: <message>"), and docs/sql-support.md lists those.
- `DroppedStateReached`: the step catches it and takes the step again as a recompute.
- `TableMissing`, `NotDeltaTable`: callers turn them into `InputUnreadable` (collected) or take
  them for "no table yet".
- `UncomparableType` and the `ValueError`s of planning/types.py and execution/engine/: a type
  string or a Delta type the code cannot parse; callers catch them (the planner then recomputes,
  a column is compared as it is), or the code has a bug. No config is parsed with `ValueError`:
  config_kinds.py raises `ConfigError`.
- `NotImplementedError`: abstract methods. `KeyError`: a plan naming a table its step did not
  bind, a bug of the planner.
- a bare `raise`, or `raise error` of a caught error: its message is collected where it was
  first raised.

A raise whose message is only another error's (`raise DbtRuntimeError(str(exc))`) is listed in
`WRAPPERS`, and a message that is truly internal in `INTERNAL`, each with its reason.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Dict, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[2]
CODE = ROOT / "dbt" / "adapters" / "streamsql"
MACROS = ROOT / "dbt" / "include" / "streamsql" / "macros"
DOC = ROOT / "docs" / "errors.md"

USER_FACING = {
    "StepError",  # a step's errors, reported as the model's failure; the next three subclass it
    "ConfigError",
    "EmitFinalConfigError",
    "InputUnreadable",
    "LatenessConfigError",  # raised again as a StepError (event_time/rules.py)
    "PlanningError",  # raised again as "Model <m>: <message>" (pipeline/step.py, explain.py)
    "SideTableError",  # raised again as a DbtRuntimeError (impl.py)
    "InjectedFault",  # test-only, but a user may have the switch set
    "DbtRuntimeError",
    "DbtDatabaseError",
    "DbtConfigError",
    "CompilationError",
    "FailedToConnectError",
}
KEY_WORDS = 4
KEY_LENGTH = 10
# fewer literal words than this, and no key: the raise passes another error's message on
WRAPPER_WORDS = 3

# (file under dbt/, text of the message as written): why the raise is not looked up
WRAPPERS: Dict[Tuple[str, str], str] = {
    ("connections.py", "str(exc)"): "Spark's error of a statement, or a failed connection's "
    "DbtRuntimeError, as dbt's error type",
    ("connections.py", "status.errorMessage"): "the Thrift Server's error for a statement",
    ("event_time/rules.py", "str(exc)"): "a LatenessConfigError's message, as a StepError",
    ("impl.py", "str(exc)"): "a StepError's or SideTableError's message, as dbt's error type",
    ("pipeline/step.py", "{error}"): "'Model <m>: ' before a PlanningError's message",
    ("execution/explain.py", "{error}"): "'Model <m>: ' before a PlanningError's message",
    ("spark/warm_server.py", "writer_claim.refusal_in(log_tail(paths), paths.log)"): "the "
    "writer claim's refusal (ClaimRefused) that the server wrote to its log before exiting",
}
INTERNAL: Dict[Tuple[str, str], str] = {
    ("engine/side_tables.py", "were not handed over"): "the package's own materialization hands "
    "dbt's side-table macros over; a user's override of a macro does not change that",
    ("engine/side_tables.py", "no macro implements"): "the package's own macro files, rendered "
    "without dbt (a step run from Python), lack one of its macros",
}


class Raised(NamedTuple):
    where: str  # path:line
    fragments: List[str]  # the message's literal parts, in order, normalized
    source: str  # the message as written


def normalize(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("`", "")).strip().lower()


def _words(fragment: str) -> int:
    return len(re.findall(r"\w+", fragment))


def _fragments(parts: Sequence[Optional[str]]) -> List[str]:
    """The literal runs between the computed parts (None), normalized, without the punctuation
    at their ends (`(`, `: `, a quote) that the doc's placeholders stand beside."""
    runs, current = [], ""
    for part in parts:
        if part is None:
            runs.append(current)
            current = ""
        else:
            current += part
    runs.append(current)
    trimmed = [re.sub(r"^\W+|\W+$", "", normalize(run)) for run in runs]
    return [run for run in trimmed if run]


# Python


def _parts(node: ast.expr) -> Optional[List[Optional[str]]]:
    """`node` as literal strings and None for each computed part; None when it is not a string
    built from literals (a variable, `str(exc)`)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return [
            v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else None
            for v in node.values
        ]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _parts(node.left), _parts(node.right)
        if left is None and right is None:
            return None
        return (left or [None]) + (right or [None])
    return None


def _name(node: ast.expr) -> Optional[str]:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


Functions = Mapping[str, List[ast.FunctionDef]]


def functions_of(trees: Sequence[ast.Module]) -> Dict[str, List[ast.FunctionDef]]:
    found: Dict[str, List[ast.FunctionDef]] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                found.setdefault(node.name, []).append(node)
    return found


def _built_by(variable: str, scope: ast.AST, functions: Functions) -> List[ast.expr]:
    """The strings a function returns where `scope` sets `variable` to its call."""
    returned: List[ast.expr] = []
    for node in ast.walk(scope):
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
            continue
        if any(isinstance(t, ast.Name) and t.id == variable for t in node.targets):
            for function in functions.get(_name(node.value.func) or "", []):
                returned += [
                    r.value
                    for r in ast.walk(function)
                    if isinstance(r, ast.Return) and r.value is not None and _parts(r.value)
                ]
    return returned


def python_raises(source: str, where: str, functions: Functions = {}) -> Iterator[Raised]:
    """The user-facing raises of one module; `functions`: the package's, by name."""
    tree = ast.parse(source)
    scopes = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)):
            continue
        if _name(node.exc.func) not in USER_FACING or not node.exc.args:
            continue
        message = node.exc.args[0]
        scope = min(
            (s for s in scopes if s.lineno <= node.lineno <= (s.end_lineno or 0)),
            key=lambda s: (s.end_lineno or 0) - s.lineno,
            default=tree,
        )
        built = [
            text
            for variable in ast.walk(message)
            if isinstance(variable, ast.Name)
            for text in _built_by(variable.id, scope, functions)
        ]
        for text in built or [message]:
            yield Raised(
                f"{where}:{node.lineno}",
                _fragments(_parts(text) or [None]),
                ast.unparse(text),
            )


# Jinja

_JINJA_STRING = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")


def _jinja_argument(text: str, opening: int) -> List[str]:
    """The argument of the call whose `(` is at `opening`, split at its top-level `~`."""
    pieces, current, depth, at = [], "", 0, opening + 1
    while at < len(text):
        string = _JINJA_STRING.match(text, at)
        if string:
            current += string.group(0)
            at = string.end()
            continue
        char = text[at]
        if char == ")" and depth == 0:
            return pieces + [current.strip()]
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "~" and depth == 0:
            pieces.append(current.strip())
            current = ""
        else:
            current += char
        at += 1
    raise AssertionError(f"an unclosed raise_compiler_error( at {opening}")


def macro_raises(source: str, where: str) -> Iterator[Raised]:
    """The `exceptions.raise_compiler_error(...)` calls of one macro file."""
    for call in re.finditer(r"exceptions\.raise_compiler_error\s*\(", source):
        pieces = _jinja_argument(source, call.end() - 1)
        parts = [p[1:-1] if _JINJA_STRING.fullmatch(p) else None for p in pieces]
        line = source.count("\n", 0, call.start()) + 1
        yield Raised(f"{where}:{line}", _fragments(parts), " ~ ".join(pieces))


def collected() -> List[Raised]:
    sources = {str(p.relative_to(ROOT)): p.read_text() for p in sorted(CODE.rglob("*.py"))}
    functions = functions_of([ast.parse(source) for source in sources.values()])
    found: List[Raised] = []
    for where, source in sources.items():
        found += python_raises(source, where, functions)
    for path in sorted(MACROS.rglob("*.sql")):
        found += macro_raises(path.read_text(), str(path.relative_to(ROOT)))
    return found


# Looking a message up


def _candidates(raised: Raised) -> List[str]:
    return [f for f in raised.fragments if _words(f) >= KEY_WORDS]


def key(raised: Raised, others: Sequence[Raised]) -> Optional[str]:
    """What docs/errors.md must contain for `raised` (None: it has no fragment long enough)."""
    candidates = _candidates(raised)
    theirs = [f for o in others if o.fragments != raised.fragments for f in _candidates(o)]
    for fragment in candidates:
        words = fragment.split()
        for length in range(min(KEY_LENGTH, len(words)), len(words) + 1):
            prefix = " ".join(words[:length])
            if not any(prefix in other for other in theirs):
                return prefix
    return " ".join(candidates[0].split()[:KEY_LENGTH]) if candidates else None


def documented(raised: Raised, others: Sequence[Raised], doc: str) -> bool:
    found = key(raised, others)
    if found is not None:
        return found in normalize(doc)
    pattern = ".*?".join(re.escape(f) for f in raised.fragments)
    return any(re.search(pattern, normalize(line)) for line in doc.splitlines())


def _listed(raised: Raised, listing: Mapping[Tuple[str, str], str]) -> bool:
    path = raised.where.rsplit(":", 1)[0]
    return any(path.endswith(f) and text in raised.source for f, text in listing)


def is_wrapper(raised: Raised) -> bool:
    return not _candidates(raised) and sum(map(_words, raised.fragments)) < WRAPPER_WORDS


def undocumented(raised: Sequence[Raised], doc: str) -> List[str]:
    """One line for each raise the doc lacks, or that passes on a message unlisted."""
    problems = []
    for item in raised:
        if _listed(item, INTERNAL):
            continue
        if is_wrapper(item):
            if not _listed(item, WRAPPERS):
                problems.append(
                    f"{item.where}: {item.source} passes on another message: list it in WRAPPERS"
                )
        elif not documented(item, raised, doc):
            shown = key(item, raised) or " ... ".join(item.fragments)
            problems.append(f"{item.where}: '{shown}' is not in docs/errors.md ({item.source})")
    return problems


# Tests


def test_every_raised_message_is_in_the_doc() -> None:
    raised = collected()
    assert len(raised) > 100  # the collector found the raises
    problems = undocumented(raised, DOC.read_text())
    assert not problems, "\n".join(problems)


def test_the_allow_lists_name_raises_that_exist() -> None:
    raised = collected()
    wrappers = [item for item in raised if is_wrapper(item)]
    for entries, among in ((WRAPPERS, wrappers), (INTERNAL, raised)):
        for entry in entries:
            assert any(_listed(item, {entry: ""}) for item in among), f"{entry} matches no raise"


SYNTHETIC = """
def check(model, value):
    if value is None:
        raise StepError(
            f"Model {model}: config frobnicate = {value!r} is not a frobnication. Use "
            "a frobnication such as 'twice'."
        )
    reason = why(model)
    if reason:
        raise DbtRuntimeError(reason)
    try:
        frobnicate(value)
    except OSError as error:
        raise DbtRuntimeError(str(error)) from error
    raise KeyError(f"the plan refers to {value}, which this step did not bind")

def why(model):
    if model:
        return None
    return f"Model {model}: its frobnication of {model} drifted since the last step"
"""


def test_a_new_raise_without_a_doc_entry_fails() -> None:
    doc = DOC.read_text()
    raised = list(python_raises(SYNTHETIC, "synthetic.py", functions_of([ast.parse(SYNTHETIC)])))
    # the message `why` builds is read at the raise of `reason`; the KeyError is not collected
    assert [r.where for r in raised] == ["synthetic.py:4", "synthetic.py:10", "synthetic.py:14"]
    assert len(undocumented(raised, doc)) == 3
    entries = (
        "| `Model <m>: config frobnicate = <v> is not a frobnication. Use a frobnication such as"
        " 'twice'.` | ... | ... |\n"
        "| `Model <m>: its frobnication of <m> drifted since the last step` | ... | ... |\n"
    )
    (wrapper,) = undocumented(raised, doc + entries)
    assert wrapper.startswith("synthetic.py:14: str(error) passes on another message")


def test_a_message_without_a_key_is_matched_on_one_line() -> None:
    source = 'def f(point, model):\n    raise InjectedFault(f"fault at {point} (step {model})")\n'
    (raised,) = python_raises(source, "synthetic.py")
    assert key(raised, []) is None and not is_wrapper(raised)
    assert documented(raised, [], "| `fault at <point> (step <m>)` | x |")
    assert not documented(raised, [], "| `fault at <point>` |\n| (step <m>) |")


def test_macro_messages_are_read_with_their_computed_parts_as_wildcards() -> None:
    source = (
        '{%- do exceptions.raise_compiler_error(name ~ ": " ~ column ~ " is not a lateness'
        " column (its config: \" ~ (node.config.get('lateness') or 'none') ~ \").\") -%}"
    )
    (raised,) = macro_raises(source, "synthetic.sql")
    assert raised.fragments == ["is not a lateness column (its config"]
