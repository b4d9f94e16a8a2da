"""What the docs show of the sample project matches the sample project.

- The demo prints `passed/total` of `dbt test` per step. The README and docs/sample_project.md show
  that output; when a test was added to the sample project they kept an older total (28 where the
  demo ran 32). The sample project's tests are counted here from its files, as dbt does: every
  entry of a model's or a column's `data_tests` (or `tests`), and every singular test.
- `streamsql_flush` fails on a model that declares no watermark, so the docs' examples of it name
  a sample project model that declares one.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ROOT / "sample_project"
DOCS_WITH_DEMO_OUTPUT = [ROOT / "README.md", ROOT / "docs" / "sample_project.md"]
# A row of the demo's table: step, read, applied, ..., then `passed/total` last.
DEMO_ROW = re.compile(r"^\s*\d+\s+\d+\s+\d+\s.*\s(\d+)/(\d+)\s*$")


FLUSH_EXAMPLE = re.compile(r"streamsql_flush --args '\{model: ([^}<>]+)\}'")


def model_configs() -> dict:
    """The sample project's models, by name, with the `config` of their YAML entries."""
    configs = {path.stem: {} for path in (PROJECT / "models").rglob("*.sql")}
    for path in sorted((PROJECT / "models").rglob("*.yml")):
        for model in (yaml.safe_load(path.read_text()) or {}).get("models") or []:
            configs[model["name"]] = model.get("config") or {}
    return configs


def count_tests(node: dict) -> int:
    return len(node.get("data_tests") or node.get("tests") or [])


def sample_project_test_count() -> int:
    count = 0
    for path in sorted((PROJECT / "models").rglob("*.yml")):
        document = yaml.safe_load(path.read_text()) or {}
        nodes = list(document.get("models") or [])
        for source in document.get("sources") or []:
            nodes.append(source)
            nodes.extend(source.get("tables") or [])
        for node in nodes:
            count += count_tests(node)
            count += sum(count_tests(column) for column in node.get("columns") or [])
    singular = list((PROJECT / "tests").glob("*.sql"))  # not tests/generic/: definitions
    return count + len(singular)


def test_the_count_sees_the_projects_tests():
    assert sample_project_test_count() > 10


def test_the_demo_output_in_the_docs_shows_the_sample_projects_number_of_tests():
    expected = sample_project_test_count()
    rows = [
        (path.relative_to(ROOT), line)
        for path in DOCS_WITH_DEMO_OUTPUT
        for line in path.read_text().splitlines()
        if DEMO_ROW.match(line)
    ]
    assert len(rows) >= 2, "no demo output found in the docs: update DEMO_ROW"
    wrong = [
        f"{path}: {line.strip()}"
        for path, line in rows
        if DEMO_ROW.match(line).groups() != (str(expected), str(expected))
    ]
    assert not wrong, (
        f"The sample project has {expected} tests, so the demo prints {expected}/{expected} "
        "when they pass; these rows show another number:\n" + "\n".join(wrong)
    )


def test_the_docs_flush_a_sample_project_model_that_declares_a_watermark():
    configs = model_configs()
    examples = [
        (path.relative_to(ROOT), match.group(1).strip())
        for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
        for match in FLUSH_EXAMPLE.finditer(path.read_text())
    ]
    assert examples, "no streamsql_flush example found: update FLUSH_EXAMPLE"
    wrong = [
        f"{path}: {name}" for path, name in examples if not configs.get(name, {}).get("watermark")
    ]
    watermarked = sorted(name for name, config in configs.items() if config.get("watermark"))
    assert not wrong, (
        "These streamsql_flush examples name a model that is not in the sample project or "
        f"declares no watermark (the flush would fail); name one of {watermarked}:\n"
        + "\n".join(wrong)
    )
