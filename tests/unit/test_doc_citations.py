"""Code and docs cite documents that are in this repository.

Comments once cited sections of a SPEC.md that the repository does not contain ("SPEC section
4"); a reader could not follow them. What those sections said is in docs/ (for example
docs/lateness-and-watermark.md), and citations name those pages instead.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEARCHED = ["dbt", "docs", "tests", "bench", "scripts", "sample_project", "README.md"]
SUFFIXES = {".py", ".sql", ".md", ".yml", ".yaml", ".sh", ".txt"}
MISSING_DOCUMENT = re.compile(r"\bSPEC(?:\s+section\b|\.md\b)", re.IGNORECASE)


def searched_files():
    for name in SEARCHED:
        path = ROOT / name
        if path.is_file():
            yield path
            continue
        for file in sorted(path.rglob("*")):
            if (
                file.suffix in SUFFIXES
                and file.is_file()
                and "target" not in file.parts
                and file != Path(__file__).resolve()  # this file names what it looks for
            ):
                yield file


def test_the_searched_folders_hold_files():
    files = {file.relative_to(ROOT).parts[0] for file in searched_files()}
    assert {"dbt", "docs", "tests"} <= files


def test_nothing_cites_a_spec_document_the_repository_does_not_have():
    assert not (ROOT / "SPEC.md").exists(), "SPEC.md exists now: this test is obsolete"
    citations = [
        f"{file.relative_to(ROOT)}:{number}: {line.strip()}"
        for file in searched_files()
        for number, line in enumerate(file.read_text(errors="replace").splitlines(), 1)
        if MISSING_DOCUMENT.search(line)
    ]
    assert not citations, (
        "These lines cite a SPEC document that is not in the repository; cite the page of docs/ "
        "that states the rule instead (docs/steps.md, docs/lateness-and-watermark.md, ...):\n"
        + "\n".join(citations)
    )


CITED_RESULT = re.compile(r"\bresults/([A-Za-z0-9_.*-]+\.(?:md|json|png|gz))\b")


def test_every_cited_benchmark_result_is_in_bench_results():
    """Results a run replaced leave bench/results for git history (bench/results/README.md);
    what the code and docs cite as `bench/results/<file>` must still be there."""
    results = ROOT / "bench" / "results"
    missing = [
        f"{file.relative_to(ROOT)}:{number}: results/{name}"
        for file in searched_files()
        for number, line in enumerate(file.read_text(errors="replace").splitlines(), 1)
        for name in CITED_RESULT.findall(line)
        if not any(results.glob(name))
    ]
    assert not missing, (
        "These lines cite a file bench/results does not hold; cite the run that replaced it, or "
        "say the file is in git history without the results/ path:\n" + "\n".join(missing)
    )
