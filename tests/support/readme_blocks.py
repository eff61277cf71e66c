"""The README's tested code blocks: find them, split them into commands, and compare outputs.

A tested block follows a `<!-- readme-test: NAME -->` line. In a shell block every line that is
not a comment is (part of) a command (a trailing `\\` continues it on the next line); the full-line
comments right after a command are its expected output, one comment per line (`# text`), and a
command with none must print nothing. A comment at the end of a command line is a remark for the
reader and is not compared.

Expected lines match actual lines when they are equal after these allowances, which the README
states in words: runs of blanks are one blank; `...` stands for any text within a line, and a
line that is only `...` for any number of lines; a timestamp (2025-06-02T09:15:04.211Z) matches
any timestamp; and with `any_shard` a descriptor's shard part (`demo:s1:p1:1`) matches any shard
name (the Redis config names its shards r1, r2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MARKER = re.compile(r"^<!-- readme-test: ([\w-]+) -->\n```\w*\n(.*?)^```", re.M | re.S)
_TOKENS = re.compile(
    r"(?P<blank>[ \t]+)|(?P<any>\.\.\.)"
    r"|(?P<time>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)"
    r"|(?P<descriptor>\b\w+:s\w+:p\d+:\d+\b)"
)
_TIME = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


@dataclass
class Step:
    command: str
    expected: list[str]


def blocks(readme: str, name: str) -> list[str]:
    """The bodies of the code blocks marked `name`, in README order."""
    found = [body for marker, body in MARKER.findall(readme) if marker == name]
    if not found:
        raise AssertionError(f"README has no block marked <!-- readme-test: {name} -->")
    return found


def shell_steps(block: str) -> list[Step]:
    """Commands (continuation lines joined) with the comment lines that follow each."""
    steps: list[Step] = []
    lines = block.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        if line.lstrip().startswith("#"):
            if not steps:
                raise AssertionError(f"expected output before any command: {line!r}")
            steps[-1].expected.append(_comment_text(line))
            i += 1
            continue
        command = [line]
        while command[-1].rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            command.append(lines[i])
        steps.append(Step("\n".join(command), []))
        i += 1
    return steps


def _comment_text(line: str) -> str:
    text = line.lstrip()[1:]
    return text[1:] if text.startswith(" ") else text


def line_pattern(expected: str, any_shard: bool = False) -> str:
    """The regex one expected line stands for (see the module docstring)."""
    parts, pos = [], 0
    text = expected.strip()
    for match in _TOKENS.finditer(text):
        parts.append(re.escape(text[pos : match.start()]))
        kind, value = match.lastgroup, match.group()
        if kind == "blank":
            parts.append(r"[ \t]+")
        elif kind == "any":
            parts.append(r"[^\n]*?")
        elif kind == "time":
            parts.append(_TIME)
        elif any_shard:
            queue, _, rest = value.partition(":s")
            _, _, tail = rest.partition(":p")
            priority, _, _ = tail.partition(":")
            parts.append(re.escape(queue) + r":s\w+:p" + priority + r":\d+")
        else:
            parts.append(re.escape(value))
        pos = match.end()
    parts.append(re.escape(text[pos:]))
    return "".join(parts)


def output_matches(expected: list[str], actual: str, any_shard: bool = False) -> bool:
    """Whether `actual` (a command's whole output) matches the expected lines."""
    pattern = "".join(
        r"(?:[^\n]*\n)*?" if line.strip() == "..." else line_pattern(line, any_shard) + r"\n"
        for line in expected
    )
    lines = [line.strip() for line in actual.splitlines()]
    text = "".join(line + "\n" for line in lines)
    return re.fullmatch(pattern, text) is not None


def line_matches(expected: str, actual: str, any_shard: bool = False) -> bool:
    return re.fullmatch(line_pattern(expected, any_shard), actual.strip()) is not None
