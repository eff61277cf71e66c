"""The walls of CONTRIBUTING.md, checked on every run: lint, format, types, imports, complexity.

Each wall is its own test, so a failure names the wall. The tools run as subprocesses from the
interpreter running the tests (the project's .venv, where `./scripts/test` installs them with the
`test` extra, pinned in pyproject.toml), with their settings from pyproject.toml and their caches
in the checkout (.ruff_cache, .mypy_cache, .import_linter_cache), so a warm run takes seconds. A
missing tool fails rather than skips: a wall nobody checks is not a wall.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

from radon.complexity import cc_visit
from radon.visitors import Function

ROOT = Path(__file__).resolve().parents[2]
#: the tool scripts installed beside the interpreter running the tests
BIN = Path(sys.executable).parent
#: the trees whose functions the complexity wall covers
COMPLEXITY_TREES = ("pinlater", "backends", "worker_sdk", "tests", "scripts")
MAX_COMPLEXITY = 15
#: a cold mypy run on a loaded 2-core machine takes well under this
TOOL_TIMEOUT_S = 240
#: enough of a tool's report to act on, not a page of it
REPORT_CHARS = 6000


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=ROOT, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False
    )


def _tool(name: str) -> str:
    path = BIN / name
    assert path.exists(), f"{name} is not installed beside {sys.executable}: run ./scripts/test"
    return str(path)


def _assert_clean(result: subprocess.CompletedProcess[str], what: str) -> None:
    report = (result.stdout + result.stderr).strip()
    assert result.returncode == 0, (
        f"{what} failed (exit {result.returncode}):\n" + report[-REPORT_CHARS:]
    )


def test_ruff_lint_is_clean() -> None:
    _assert_clean(_run(_tool("ruff"), "check", "--no-fix", "."), "ruff check .")


def test_ruff_format_is_clean() -> None:
    _assert_clean(_run(_tool("ruff"), "format", "--check", "."), "ruff format --check .")


def test_mypy_is_clean() -> None:
    # `-m mypy` under this interpreter: mypy then sees the .venv's packages; files and settings
    # come from [tool.mypy]
    _assert_clean(_run(sys.executable, "-m", "mypy"), "mypy")


def test_import_contracts_hold() -> None:
    _assert_clean(_run(_tool("lint-imports")), "lint-imports ([tool.importlinter])")


def test_warnings_are_errors_under_pytest() -> None:
    """`error` first in [tool.pytest.ini_options] filterwarnings; any later entry may only
    ignore a named warning (its reason is a comment beside it)."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        filters = tomllib.load(f)["tool"]["pytest"]["ini_options"]["filterwarnings"]
    assert filters[0] == "error", filters
    assert all(entry.startswith("ignore:") for entry in filters[1:]), filters


def _functions(blocks: list, outer: str = "") -> Iterator[tuple[str, Function]]:
    """(qualified name, function) for every function radon scored: top-level ones, methods,
    and the closures inside them (radon names a closure without the function holding it)."""
    for block in blocks:
        if isinstance(block, Function):
            name = f"{outer}.{block.name}" if outer else block.fullname
            yield name, block
            yield from _functions(block.closures, name)


def _offenders(path: str, source: str) -> list[str]:
    return [
        f"{path}:{fn.lineno} {name} complexity {fn.complexity}"
        for name, fn in _functions(cc_visit(source))
        if fn.complexity > MAX_COMPLEXITY
    ]


def _sources(tree: str) -> list[tuple[str, str]]:
    return [
        (str(path.relative_to(ROOT)), path.read_text(encoding="utf-8"))
        for path in sorted((ROOT / tree).rglob("*.py"))
    ]


def test_no_function_is_too_complex() -> None:
    offenders = [
        line
        for tree in COMPLEXITY_TREES
        for path, source in _sources(tree)
        for line in _offenders(path, source)
    ]
    assert not offenders, (
        f"functions above cyclomatic complexity {MAX_COMPLEXITY} (radon cc); split them into "
        "named helpers:\n" + "\n".join(offenders)
    )


def test_the_complexity_wall_sees_every_tree() -> None:
    """The wall would pass vacuously if a tree moved or radon stopped finding functions."""
    for tree in COMPLEXITY_TREES:
        scored = [fn for _, source in _sources(tree) for fn in _functions(cc_visit(source))]
        assert len(scored) > 5, f"radon scored only {len(scored)} functions under {tree}/"


def _branches(count: int, indent: str) -> str:
    return "".join(f"{indent}if x == {i}:\n{indent}    return {i}\n" for i in range(count))


def test_the_complexity_wall_names_closures_and_methods() -> None:
    """A closure or a method above the limit is named with its place, as a function is; a
    function at the limit passes."""
    source = (
        "class Host:\n"
        "    def outer(self, x):\n"
        "        def inner(x):\n" + _branches(16, " " * 12) + "        return inner(x)\n"
        "\n"
        "    def method(self, x):\n" + _branches(16, " " * 8) + "\n"
        "def at_the_limit(x):\n" + _branches(14, " " * 4)
    )
    assert _offenders("x.py", source) == [
        "x.py:3 Host.outer.inner complexity 17",
        "x.py:38 Host.method complexity 17",
    ]
