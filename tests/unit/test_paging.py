"""pinlater.storage.paging.filtered: the one body-filter paging loop every backend uses."""

from __future__ import annotations

import pytest

from pinlater.storage.paging import FILTER_PAGE_SIZE, filtered


class Store:
    """Items 0..n-1 with body b"even"/b"odd"; records every page read."""

    def __init__(self, n: int):
        self.items = list(range(n))
        self.reads: list[tuple[int | None, int]] = []

    def read_page(self, after: int | None, size: int):
        self.reads.append((after, size))
        start = 0 if after is None else after + 1
        page = self.items[start : start + size]
        return page, (page[-1] if len(page) == size else None)


def body(item: int) -> bytes:
    return b"even" if item % 2 == 0 else b"odd"


def is_even(raw: bytes) -> bool:
    return raw == b"even"


def test_pages_are_read_until_enough_items_pass():
    store = Store(1000)
    found = list(filtered(store.read_page, body, is_even, 150))
    assert found == list(range(0, 300, 2))
    assert [size for _, size in store.reads] == [FILTER_PAGE_SIZE] * 3
    assert store.reads[1][0] == FILTER_PAGE_SIZE - 1  # each page starts after the last one


def test_a_short_page_is_the_last_one():
    store = Store(FILTER_PAGE_SIZE + 3)
    assert len(list(filtered(store.read_page, body, is_even, 10_000))) == 52
    assert len(store.reads) == 2


def test_pages_are_no_larger_than_the_limit_and_none_is_read_for_zero():
    store = Store(100)
    assert list(filtered(store.read_page, body, is_even, 3)) == [0, 2, 4]
    assert {size for _, size in store.reads} == {3}
    store = Store(100)
    assert list(filtered(store.read_page, body, is_even, 0)) == []
    assert store.reads == []


def test_pages_are_read_only_as_items_are_asked_for():
    store = Store(1000)
    matches = filtered(store.read_page, body, is_even, 1000)
    assert next(matches) == 0
    assert len(store.reads) == 1


def test_the_filters_own_error_propagates():
    def broken(raw: bytes) -> bool:
        raise TimeoutError("regex over its budget")

    with pytest.raises(TimeoutError):
        list(filtered(Store(5).read_page, body, broken, 5))
