"""The rules live once, in docs/semantics.md, and a named conformance test pins each one.

Every table row of the page whose first cell is an id (`T-ack-success`) is a rule. Conformance
tests name the rows they pin with `@pytest.mark.rule(...)`; this test reads those markers from
the test modules' source (ast, so no backend has to run) and fails when a row has no test, a
test names no row or an unknown one, or the README's short table disagrees with the page. The
shard kit's checks (pinlater/storage/shard_kit) name rows too (`rule=`): only existing ones, and
not every row, since rows are wire-level.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from pinlater.storage.shard_kit import CHECKS

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "semantics.md"
README = ROOT / "README.md"
CONFORMANCE = ROOT / "tests" / "conformance"
README_SECTION = "## Job semantics in one table"

#: id prefixes and the page sections they belong to
PREFIXES = {
    "T": "States and transitions",
    "C": "Claims",
    "E": "Errors",
    "D": "Dequeue order and limits",
    "W": "Long-poll dequeue",
    "F": "FIFO queues",
    "B": "Bodies, statuses, times",
    "I": "Descriptors and ids",
    "L": "Lookup",
    "N": "Counts and scans",
    "Q": "Queues",
    "U": "Unique keys",
    "P": "Periodic jobs",
    "A": "Ledger",
    "J": "Janitor",
    "S": "Prefetching broker: storage",
    "X": "Concurrency",
}
_ID = r"[A-Z]-[a-z0-9]+(?:-[a-z0-9]+)*"
_ROW = re.compile(rf"^\|\s*`({_ID})`\s*\|(.*)\|\s*$")
_MENTION = re.compile(rf"`({_ID})`")


def table_rows(markdown: str) -> dict[str, list[str]]:
    """id -> the row's other cells, for every table row whose first cell is an id."""
    rows: dict[str, list[str]] = {}
    for line in markdown.splitlines():
        match = _ROW.match(line)
        if match is None:
            continue
        rule_id, rest = match.groups()
        assert rule_id not in rows, f"{rule_id} is defined twice"
        rows[rule_id] = [cell.strip() for cell in rest.split("|")]
    return rows


def rule_marker_ids(decorator: ast.expr, where: str) -> list[str] | None:
    """The ids of a `@pytest.mark.rule("...", ...)` decorator, None for any other decorator."""
    if not isinstance(decorator, ast.Call) or ast.unparse(decorator.func) != "pytest.mark.rule":
        return None
    ids = []
    for arg in decorator.args:
        assert isinstance(arg, ast.Constant) and isinstance(arg.value, str), (
            f"{where}: rule ids must be string literals, got {ast.unparse(arg)}"
        )
        ids.append(arg.value)
    assert ids and not decorator.keywords, f"{where}: @pytest.mark.rule needs ids only"
    return ids


def conformance_tests() -> dict[str, list[str]]:
    """'module::test' -> the rule ids it names, for every test function of the suite."""
    tests: dict[str, list[str]] = {}
    for path in sorted(CONFORMANCE.glob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                where = f"{path.name}::{node.name}"
                tests[where] = [
                    rule_id
                    for decorator in node.decorator_list
                    for rule_id in rule_marker_ids(decorator, where) or ()
                ]
    return tests


def docs_rows() -> dict[str, list[str]]:
    return table_rows(DOCS.read_text(encoding="utf-8"))


def readme_section() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(README_SECTION)
    end = text.find("\n## ", start + len(README_SECTION))
    return text[start : end if end != -1 else None]


def test_the_page_has_rules_with_known_prefixes():
    rows = docs_rows()
    assert len(rows) >= 50, f"only {len(rows)} rule rows parsed from {DOCS}"
    bad = sorted(r for r in rows if r.split("-", 1)[0] not in PREFIXES)
    assert not bad, f"ids with an unknown prefix (known: {sorted(PREFIXES)}): {bad}"
    assert set(PREFIXES) == {r.split("-", 1)[0] for r in rows}, "a section lost all its rows"


def test_ids_the_page_refers_to_exist():
    text = DOCS.read_text(encoding="utf-8")
    unknown = sorted(set(_MENTION.findall(text)) - set(docs_rows()))
    assert not unknown, f"docs/semantics.md refers to rows it does not define: {unknown}"


def test_the_suite_is_found():
    tests = conformance_tests()
    assert len(tests) >= 95, f"only {len(tests)} conformance tests found in {CONFORMANCE}"


def test_every_conformance_test_names_the_rows_it_pins():
    unnamed = sorted(name for name, ids in conformance_tests().items() if not ids)
    assert not unnamed, (
        "conformance tests without @pytest.mark.rule(...) naming their docs/semantics.md "
        f"row(s): {unnamed}"
    )


def test_conformance_tests_name_only_rows_of_the_page():
    rows = docs_rows()
    unknown = {
        name: sorted(set(ids) - set(rows))
        for name, ids in conformance_tests().items()
        if set(ids) - set(rows)
    }
    assert not unknown, f"tests name rows docs/semantics.md does not have: {unknown}"


def test_every_row_of_the_page_is_pinned_by_a_conformance_test():
    named = {rule_id for ids in conformance_tests().values() for rule_id in ids}
    untested = sorted(set(docs_rows()) - named)
    assert not untested, f"docs/semantics.md rows no conformance test names: {untested}"


def test_shard_kit_checks_name_only_rows_of_the_page():
    rows = docs_rows()
    unknown = {
        name: sorted(set(check.rules) - set(rows))
        for name, check in CHECKS.items()
        if set(check.rules) - set(rows)
    }
    assert not unknown, f"shard kit checks name rows docs/semantics.md does not have: {unknown}"
    assert any(check.rules for check in CHECKS.values()), "no shard kit check names a row"


def test_readme_table_mirrors_the_page():
    """The README's short table is a column prefix of the page's rows, cell for cell."""
    rows = docs_rows()
    readme = table_rows(readme_section())
    assert readme, f"no id rows in the README section {README_SECTION!r}"
    for rule_id, cells in readme.items():
        assert rule_id in rows, f"README row {rule_id} is not in docs/semantics.md"
        assert cells == rows[rule_id][: len(cells)], (
            f"README row {rule_id} differs from docs/semantics.md:\n"
            f"  README: {cells}\n  docs:   {rows[rule_id][: len(cells)]}"
        )
    mentioned = set(_MENTION.findall(readme_section()))
    assert not mentioned - set(rows), f"README names unknown rows: {sorted(mentioned - set(rows))}"


def test_the_checks_above_catch_what_they_claim():
    """The parsers on small inputs: a table row is found, a marker read, a bad marker refused."""
    assert table_rows("| `T-x-y` | a | b |\n| not | a | row |\n") == {"T-x-y": ["a", "b"]}
    tree = ast.parse('@pytest.mark.rule("T-a", "E-b")\n@other\ndef test_f(): pass\n')
    first, second = tree.body[0].decorator_list
    assert rule_marker_ids(first, "t") == ["T-a", "E-b"]
    assert rule_marker_ids(second, "t") is None
    bad = ast.parse("@pytest.mark.rule(NAME)\ndef test_f(): pass\n").body[0].decorator_list[0]
    try:
        rule_marker_ids(bad, "t")
    except AssertionError as exc:
        assert "string literals" in str(exc)
    else:
        raise AssertionError("a non-literal rule id was accepted")
