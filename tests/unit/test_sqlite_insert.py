"""Multi-row SQLite inserts: the run sizes, the statement text, and the ids handed back in order
for batches that need one, several and many statements, next to rows written by other means."""

from __future__ import annotations

import sqlite3

import pytest

from backends import sqlite_insert
from backends.sqlite_insert import insert_rows, multi_row_sql, row_template, runs

pytestmark = pytest.mark.backend("sqlite")

SQL = "INSERT INTO t (a, b, c, d) VALUES (0, :a, COALESCE(:b, :a), :c)"


@pytest.mark.parametrize("count", [0, 1, 2, 3, 15, 16, 17, 100, 127, 128, 129, 300, 1000])
@pytest.mark.parametrize("largest", [1, 8, 16, 128])
def test_runs_add_up_in_few_sizes(count, largest):
    sizes = list(runs(count, largest))
    assert sum(sizes) == count
    assert all(0 < size <= largest for size in sizes)
    assert sizes == sorted(sizes, reverse=True)
    # below the largest size: at most one multiple of STEP, then distinct powers of two
    small = [size for size in sizes if size < largest]
    assert len(small) == len(set(small))
    tens = [size for size in small if size >= sqlite_insert.STEP]
    assert len(tens) <= 1 and all(size % sqlite_insert.STEP == 0 for size in tens)
    assert all(size & (size - 1) == 0 for size in small if size < sqlite_insert.STEP)
    # so a table sees at most MAX_ROWS / STEP + log2(STEP) statement texts
    assert len(small) <= 1 + sqlite_insert.STEP.bit_length()


def test_a_batch_of_100_is_two_statements():
    assert list(runs(100, 128)) == [96, 4]
    assert list(runs(1000, 128)) == [128] * 7 + [96, 8]


def test_the_row_template_binds_every_named_parameter_in_order():
    head, row, names = row_template(SQL)
    assert head == "INSERT INTO t (a, b, c, d) VALUES "
    assert row == "(0, ?, COALESCE(?, ?), ?)"
    assert names == ("a", "b", "a", "c")
    assert multi_row_sql(SQL, 3) == head + ", ".join([row] * 3)
    with pytest.raises(ValueError):
        row_template("UPDATE t SET a = :a")


@pytest.fixture
def cur():
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute(
        "CREATE TABLE t (id INTEGER PRIMARY KEY AUTOINCREMENT, a INT, b INT, c BLOB, d BLOB)"
    )
    yield conn.cursor()
    conn.close()


@pytest.mark.parametrize("count", [1, 5, 100, 128, 129, 777])
def test_each_row_is_stored_with_its_own_values_and_its_id_returned_in_order(cur, count):
    cur.execute("INSERT INTO t (a) VALUES (-1)")  # an id already taken
    cur.execute("DELETE FROM t")  # AUTOINCREMENT never hands it out again
    rows = [{"a": i, "b": None if i % 2 else -i, "c": b"x" * (i % 7)} for i in range(count)]
    ids = insert_rows(cur, SQL, rows)
    assert ids == list(range(2, count + 2))
    stored = cur.execute("SELECT id, a, b, c, d FROM t ORDER BY id").fetchall()
    expected = [(ids[i], 0, i, i if i % 2 else -i, b"x" * (i % 7)) for i in range(count)]
    assert stored == expected  # b = :a, c = COALESCE(:b, :a), d = :c
    more = insert_rows(cur, SQL, [{"a": 0, "b": 0, "c": b""}] * 3)
    assert more == [count + 2, count + 3, count + 4]


def test_a_row_too_wide_for_the_largest_run_gets_smaller_statements(cur, monkeypatch):
    monkeypatch.setattr(sqlite_insert, "MAX_PARAMS", 9)  # 4 parameters a row: runs of 2
    seen: list[str] = []
    conn = cur.connection
    conn.set_trace_callback(seen.append)
    ids = insert_rows(cur, SQL, [{"a": i, "b": i, "c": b""} for i in range(5)])
    conn.set_trace_callback(None)
    assert ids == [1, 2, 3, 4, 5]
    assert [s.count("COALESCE") for s in seen] == [2, 2, 1]


def test_a_failing_statement_raises_and_the_caller_rolls_back(cur):
    cur.execute("CREATE UNIQUE INDEX t_a ON t (a)")
    cur.execute("BEGIN")
    with pytest.raises(sqlite3.IntegrityError):
        insert_rows(cur, SQL, [{"a": i % 3, "b": 0, "c": b""} for i in range(5)])
    cur.execute("ROLLBACK")
    assert cur.execute("SELECT COUNT(*) FROM t").fetchone() == (0,)
