"""The ledger's counter names are one list (pinlater/common/ledger_counters.py): the storage
keeps and reports them, and `pinlater audit` shows one column for each, in the same order."""

from __future__ import annotations

from pinlater.cli import main as cli_main
from pinlater.common import ledger_counters
from pinlater.storage import ledger
from pinlater.storage.models import NewJob
from tests.support.sqlite_env import sharded_store


def test_the_storage_and_the_cli_use_the_one_list():
    assert ledger.COUNTERS is ledger_counters.COUNTERS
    assert cli_main.LEDGER_COUNTERS is ledger_counters.COUNTERS
    assert len(set(ledger_counters.COUNTERS)) == len(ledger_counters.COUNTERS)


def test_a_book_read_from_real_storage_reports_exactly_the_audit_columns(tmp_path):
    store = sharded_store(tmp_path, shards=("1",), num_priorities=1)
    try:
        store.enqueue("q", [NewJob(b"x")] * 2)
        (book,) = store.ledger("q").values()
        counters = book.as_dict()["counters"]
        assert isinstance(counters, dict)
        assert tuple(counters) == cli_main.LEDGER_COUNTERS
        assert counters["enqueued"] == 2
    finally:
        store.close()
