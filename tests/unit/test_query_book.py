"""backends.sql_base.QueryBook: how dialect query files combine with `queries/common/`.

A dialect file adds the queries common/ lacks; it replaces a common query only with an
`-- overrides: <reason>` line, so no dialect silently diverges from the shared text.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from backends.mysql import MYSQL, MySQLShard
from backends.sql_base import QUERY_DIR, QueryBook, SQLDialect, parse_named_queries
from backends.sqlite import SQLiteShard

DIALECT = SQLDialect(name="toy", param_format="%({})s", quote_char="`", row_lock="FOR UPDATE")
COMMON = """
-- name: shared
-- A query both dialects use.
SELECT 1 FROM {table} WHERE updated_at = :now
"""


def book_with(tmp_path: Path, dialect_sql: str) -> QueryBook:
    (tmp_path / "common").mkdir()
    (tmp_path / "common" / "jobs.sql").write_text(COMMON)
    (tmp_path / DIALECT.name).mkdir()
    (tmp_path / DIALECT.name / "transitions.sql").write_text(dialect_sql)
    return QueryBook(DIALECT, root=tmp_path)


def test_a_dialect_may_add_queries_that_common_lacks(tmp_path):
    book = book_with(tmp_path, "-- name: own\n-- Only this dialect.\nSELECT 2\n")
    assert set(book.queries) == {"shared", "own"}
    assert book.queries["shared"].sql.endswith("updated_at = %(now)s")


def test_a_silent_override_of_a_common_query_fails_at_load(tmp_path):
    with pytest.raises(ValueError, match=r"'shared' replaces the common query .* overrides"):
        book_with(tmp_path, "-- name: shared\n-- Same name, no reason given.\nSELECT 3\n")


def test_an_override_with_a_stated_reason_replaces_the_common_query(tmp_path):
    book = book_with(
        tmp_path,
        "-- name: shared\n-- The dialect's own text.\n"
        "-- overrides: this engine needs an index hint\nSELECT 3 FROM {table}\n",
    )
    assert book.queries["shared"].sql == "SELECT 3 FROM {table}"
    assert book.queries["shared"].overrides == "this engine needs an index hint"
    assert book.queries["shared"].doc.startswith("The dialect's own text.")


def test_a_reason_for_a_query_that_overrides_nothing_fails_at_load(tmp_path):
    with pytest.raises(ValueError, match=r"'own' says it overrides .* no query of that name"):
        book_with(tmp_path, "-- name: own\n-- New.\n-- overrides: stale reason\nSELECT 2\n")


def test_a_query_defined_in_two_files_of_one_folder_fails_at_load(tmp_path):
    (tmp_path / "common").mkdir()
    (tmp_path / "common" / "a.sql").write_text(COMMON)
    (tmp_path / "common" / "b.sql").write_text(COMMON)
    with pytest.raises(ValueError, match="also defined"):
        QueryBook(DIALECT, root=tmp_path)


def test_the_shipped_dialects_load_and_state_every_override():
    common = set()
    for path in (QUERY_DIR / "common").glob("*.sql"):
        common |= set(parse_named_queries(path.read_text(), str(path)))
    for shard in (SQLiteShard, MySQLShard):
        book = shard.queries
        assert common <= set(book.queries)
        for name in common:
            shared = name not in _dialect_names(shard.dialect.name)
            assert shared or book.queries[name].overrides, name
        assert all(q.doc for q in book.queries.values())


def _dialect_names(dialect: str) -> set[str]:
    names: set[str] = set()
    for path in (QUERY_DIR / dialect).glob("*.sql"):
        names |= set(parse_named_queries(path.read_text(), str(path)))
    return names


def test_a_statement_clock_replaces_now_in_the_clocked_text(tmp_path):
    book = book_with(
        tmp_path,
        "-- name: statement_clock\n-- The clock as an expression.\n(NOW() + :clock_offset)\n",
    )
    plain = book.render("shared", table=("db", "t"))
    clocked = book.render("shared", clocked=True, table=("db", "t"))
    assert plain == "SELECT 1 FROM `db`.`t` WHERE updated_at = %(now)s"
    assert clocked == "SELECT 1 FROM `db`.`t` WHERE updated_at = (NOW() + %(clock_offset)s)"


def test_the_row_lock_is_rendered_only_when_asked_for():
    sql = MySQLShard.queries.render("dequeue_select", table=("db", "jobs_p1"))
    locked = MySQLShard.queries.render("dequeue_select", lock=True, table=("db", "jobs_p1"))
    assert "FOR UPDATE" not in sql
    assert locked.rstrip().endswith(MYSQL.row_lock)
    assert "{lock}" not in SQLiteShard.queries.render("dequeue_select", table=("q1_p1",))
