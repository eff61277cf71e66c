"""Body filters, applied in Python over bounded pages that storage reads one at a time.

A body filter is a Python callable (a regex with a time budget), never SQL or Lua, so a
filtered count, scan or delete reads candidate jobs with their bodies page by page and keeps the
ones that pass. Every backend pages through `filtered` with the same page size.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from pinlater.storage.contract import BodyFilter

#: Jobs (with bodies) read per page under a body filter. A body may be as large as the body cap
#: (1 MiB by default), so the page size bounds what one filtered call holds at once (~100 MiB at
#: worst) and how long one Redis script call blocks the server building its reply; one page's
#: round trip is still small beside running the filter over 100 bodies.
FILTER_PAGE_SIZE = 100

Item = TypeVar("Item")
Cursor = TypeVar("Cursor")
#: `read_page(cursor, size)` -> (up to `size` items after `cursor` (None: from the start), the
#: next page's cursor, or None when this page was the last: fewer than `size` items read)
PageReader = Callable[[Cursor | None, int], tuple[Sequence[Item], Cursor | None]]


def filtered(
    read_page: PageReader[Cursor, Item],
    body: Callable[[Item], bytes],
    body_filter: BodyFilter,
    limit: int,
) -> Iterator[Item]:
    """Up to `limit` items whose `body(item)` passes `body_filter`, in page order. Pages hold
    min(limit, FILTER_PAGE_SIZE) items (never more bodies than asked for) and are read only as
    the caller asks for more items; the filter's own errors propagate."""
    size = min(limit, FILTER_PAGE_SIZE)
    found = 0
    cursor: Cursor | None = None
    while found < limit:
        items, cursor = read_page(cursor, size)
        for item in items:
            if body_filter(body(item)):
                yield item
                found += 1
                if found >= limit:
                    return
        if cursor is None:
            return
