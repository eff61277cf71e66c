"""The README test's block reader and output matcher (tests/support/readme_blocks.py): what it
lets differ, and that it still catches a real difference."""

from __future__ import annotations

from tests.support.readme_blocks import blocks, line_matches, output_matches, shell_steps

README = """intro
<!-- readme-test: demo -->
```sh
P=pinlater
$P count -q demo   # a remark, not output
# 2 pending
$P run --long \\
    --flag
# ...
# done in ... s
$P quiet
```
```sh
not marked
```
"""


def test_marked_blocks_split_into_commands_with_their_expected_output():
    [block] = blocks(README, "demo")
    steps = shell_steps(block)
    assert [s.command for s in steps] == [
        "P=pinlater",
        "$P count -q demo   # a remark, not output",
        "$P run --long \\\n    --flag",
        "$P quiet",
    ]
    assert [s.expected for s in steps] == [[], ["2 pending"], ["...", "done in ... s"], []]


def test_output_must_match_line_for_line():
    assert output_matches(["2 pending"], "2 pending\n")
    assert not output_matches(["2 pending"], "2\n")  # the bug the README tour once had
    assert not output_matches(["2 pending"], "2 pending\n3 failed\n")
    assert output_matches([], "")
    assert not output_matches([], "unexpected\n")


def test_blanks_ellipses_and_timestamps_may_differ():
    assert output_matches(["a  b    c"], "a b c\n")
    assert output_matches(["...", "done in ... s"], "1/s\n2/s\ndone in 3.2 s\n")
    assert output_matches(["...", "done in ... s"], "done in 3.2 s\n")
    assert not output_matches(["...", "done in ... s"], "done in 3.2 s\nmore\n")
    assert line_matches("updated 2025-06-02T09:15:04.211Z", "updated 2031-01-01T00:00:00.000Z")
    assert not line_matches("updated 2025-06-02T09:15:04.211Z", "updated -")


def test_descriptor_shards_may_differ_only_when_asked():
    assert not line_matches("demo:s1:p1:1", "demo:sr2:p1:1")
    assert line_matches("demo:s1:p1:1", "demo:sr2:p1:7", any_shard=True)
    assert not line_matches("demo:s1:p1:1", "demo:sr2:p2:1", any_shard=True)
    assert not line_matches("demo:s1:p1:1", "other:s1:p1:1", any_shard=True)
