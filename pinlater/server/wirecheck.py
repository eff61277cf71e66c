"""One walk over a request's arguments struct before thriftpy2's Cython decoder sees it.

Why: the decoder trusts the wire. It loops `count` times over a container even when the element
type is not a real Thrift type and each element consumes no bytes (a 35-byte frame declaring a
map of 2**31 such elements costs ~10 s of CPU while holding the GIL), it recurses as deep as the
bytes say, and it turns structurally wrong values into silent None/empty lists. The walk is
O(frame size) and rejects, with a reason and the field path:

* unknown type ids (field, element, key or value types), even in empty containers;
* nesting deeper than `max_depth` (the PinLater IDL needs 5 levels: args > request >
  jobAckRequest > list > ack info; the default 16 leaves a margin for unknown optional fields);
* a string length or container count larger than the bytes left in the frame (a container of
  n elements needs at least n times its element's smallest encoding);
* containers with more than `max_items` entries (a known list field or an unknown one);
* invalid UTF-8 in a field the IDL declares `string` (not `binary`), naming the field path;
* a known container field whose element types differ from the IDL (thriftpy2 would hand the
  handler an empty list and the request would silently mean something else).

A field with a wrong wire type or an unknown id is only walked (thriftpy2 skips it and the
handler reports the resulting missing value with its own PinLaterException). Cost: a few
microseconds per field (~0.3 ms for an enqueue of 100 jobs).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

_I32 = struct.Struct("!i")
_I16 = struct.Struct("!h")
#: a field's id and, for a string field, its length (one unpack for the commonest field)
_FIELD_STRING = struct.Struct("!hi")
_FIXED = {2: 1, 3: 1, 4: 8, 6: 2, 8: 4, 10: 8}
#: a fixed-width field's bytes with its header (type, id)
_FIELD_WIDTH = {ttype: 3 + size for ttype, size in _FIXED.items()}
#: the smallest encoding of one value of each wire type (for the container-count check)
_MIN_WIDTH = {**_FIXED, 11: 4, 12: 1, 13: 6, 14: 5, 15: 5}
_NAMES = {
    2: "bool",
    3: "byte",
    4: "double",
    6: "i16",
    8: "i32",
    10: "i64",
    11: "string",
    12: "struct",
    13: "map",
    14: "set",
    15: "list",
}
_BINARY = 18  # thriftpy2's spec type for `binary`; on the wire it is a string (11)

#: every `reason` a WireError can carry (the label values of pinlater_frames_rejected_total)
REASONS = ("truncated", "bad_type", "too_deep", "too_many_items", "bad_utf8", "type_mismatch")


@dataclass(frozen=True)
class WireLimits:
    max_depth: int = 16
    #: entries allowed in any one list, set or map
    max_items: int = 20_000


class WireError(ValueError):
    """The bytes are not an acceptable binary-protocol value; `reason` is one of REASONS."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def check_args(data: bytes, pos: int, args_cls: Any, limits: WireLimits = WireLimits()) -> int:
    """Check the arguments struct of `args_cls` (a thriftpy2 `*_args` class) starting at `pos`;
    returns the offset after it. Raises WireError."""
    try:
        return _Walk(data, pos, limits).struct(pos, args_cls, limits.max_depth, "")
    except (IndexError, struct.error):
        raise WireError("truncated", "truncated value") from None


def check_struct(data: bytes, pos: int, max_depth: int = 16) -> int:
    """Structural check of a struct with no IDL knowledge (every field treated as unknown)."""
    return check_args(data, pos, None, WireLimits(max_depth=max_depth))


_KEY = object()  # the path step of a map key


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _render(path: Any) -> str:
    """The text of a lazy field path: "" (the arguments), None (unknown data: ""), or a tuple
    (parent, step) built while walking, the step a field name, an element index or _KEY. Paths
    are only spelled out for an error message: formatting one per field and element cost more
    than the walk itself."""
    if not path:
        return ""
    parent, step = path
    head = _render(parent)
    if isinstance(step, str):
        return _join(head, step)
    return f"{head}<key>" if step is _KEY else f"{head}[{step}]"


def _wire(ttype: int) -> int:
    return 11 if ttype == _BINARY else ttype


#: bytes.translate table: 1 for a non-ASCII byte, 0 for an ASCII one
_MARKS = bytes(int(b >= 0x80) for b in range(256))
_FIELDS: dict[Any, dict[int, tuple[int, int, Any, str]]] = {}
_NO_FIELDS: dict[int, tuple[int, int, Any, str]] = {}


def _fields(cls: Any) -> dict[int, tuple[int, int, Any, str]]:
    """`cls.thrift_spec` as {field id: (wire type, spec type, extra, name)}, computed once per
    struct class (the walk looks a field up for every field of every element)."""
    fields = _FIELDS.get(cls)
    if fields is None:
        fields = _FIELDS[cls] = {
            fid: (_wire(f[0]), f[0], f[2] if len(f) == 4 else None, f[1])
            for fid, f in cls.thrift_spec.items()
        }
    return fields


def _elem(spec: Any) -> tuple[int, Any]:
    """An element spec (`11`, `(12, cls)`, `(15, 11)`, `(13, (11, 18))`) as (type, extra)."""
    return (spec, None) if isinstance(spec, int) else (spec[0], spec[1])


class _Walk:
    """`path` is the lazy field path (see `_render`) while the walk follows the IDL, None inside
    unknown data. `high` is the offset of the next non-ASCII byte at or after the last string
    start looked at (the walk only moves forward): a string that ends before it is ASCII, hence
    valid UTF-8, and is not decoded (most strings of a 100-job request)."""

    __slots__ = ("data", "end", "high", "limits", "marks")

    def __init__(self, data: bytes, pos: int, limits: WireLimits):
        self.data, self.end, self.limits = data, len(data), limits
        self.high = self.end if data[pos:].isascii() else -1
        self.marks: bytes | None = None

    def struct(self, pos: int, cls: Any, depth: int, path: str | None) -> int:
        if depth <= 0:
            raise WireError("too_deep", f"nested deeper than {self.limits.max_depth} levels")
        spec = _fields(cls) if cls is not None and path is not None else _NO_FIELDS
        return self.fields(pos, spec, depth, path)

    def fields(self, pos: int, spec: dict, depth: int, path: Any) -> int:
        """The fields of a struct up to its stop byte. Strings, binaries and fixed-width values
        (nearly every field of a job or an ack) are stepped over inline: the field id is only
        looked up to name an error or to UTF-8-check a string of a non-ASCII frame."""
        data, end = self.data, self.end
        high = self.high  # a stale copy is never above self.high (it only grows): safe
        while True:
            ftype = data[pos]
            if ftype == 11:
                fid, n = _FIELD_STRING.unpack_from(data, pos + 1)
                start = pos + 7
                pos = start + n
                if pos > high or n < 0:  # high <= end: this also catches pos > end
                    self.string_field(start, n, spec.get(fid), path)
                    high = self.high
                continue
            width = _FIELD_WIDTH.get(ftype)
            if width is not None:
                pos += width
                if pos > end:
                    self.fixed_truncated(pos - width, spec, path)
                continue
            if ftype == 0:
                return pos + 1
            (fid,) = _I16.unpack_from(data, pos + 1)
            pos += 3
            fspec = spec.get(fid)
            if fspec is not None and fspec[0] == ftype:
                pos = self.value(pos, fspec[1], fspec[2], depth - 1, (path, fspec[3]))
                high = self.high
            elif ftype in _MIN_WIDTH:  # unknown id or wrong type: thriftpy2 skips it
                pos = self.value(pos, ftype, None, depth - 1, None)
                high = self.high
            else:
                raise WireError(
                    "bad_type", f"{_join(_render(path), f'field {fid}')}: invalid type id {ftype}"
                )

    def string_field(self, start: int, n: int, fspec: Any, path: Any) -> None:
        """The slow part of a string field: its length is out of range, or it may hold
        non-ASCII bytes and the IDL says `string` (an unknown field or a `binary` is not
        decoded)."""
        utf8_path = None
        if fspec is not None and fspec[0] == 11 and fspec[1] == 11:
            utf8_path = (path, fspec[3])
        if n < 0 or start + n > self.end:
            self.bad_length(n, start, utf8_path)
        if utf8_path is not None:
            self.utf8_check(start, start + n, utf8_path)

    def fixed_truncated(self, pos: int, spec: dict, path: Any) -> None:
        """Raise for the fixed-width field at `pos` that runs past the end, naming it when the
        IDL knows it (an unknown field or one with a wrong type is just a "value")."""
        ftype = self.data[pos]
        (fid,) = _I16.unpack_from(self.data, pos + 1)
        fspec = spec.get(fid)
        what = _render((path, fspec[3])) if fspec is not None and fspec[0] == ftype else "value"
        raise WireError("truncated", f"{what}: truncated")

    def value(self, pos: int, ttype: int, extra: Any, depth: int, path: Any) -> int:
        size = _FIXED.get(ttype)
        if size is not None:
            pos += size
        elif ttype in (11, _BINARY):
            pos = self.string(pos, path if ttype == 11 else None)
        elif ttype == 12:
            return self.struct(pos, extra, depth, path)
        elif ttype in (14, 15):
            pos = self.sequence(pos, extra, depth, path)
        elif ttype == 13:
            pos = self.mapping(pos, extra, depth, path)
        else:
            raise WireError("bad_type", f"{_render(path) or 'value'}: invalid type id {ttype}")
        if pos > self.end:
            raise WireError("truncated", f"{_render(path) or 'value'}: truncated")
        return pos

    def string(self, pos: int, utf8_path: Any) -> int:
        (n,) = _I32.unpack_from(self.data, pos)
        start = pos + 4
        if n < 0 or start + n > self.end:
            self.bad_length(n, start, utf8_path)
        if utf8_path is not None:
            self.utf8_check(start, start + n, utf8_path)
        return start + n

    def bad_length(self, n: int, start: int, utf8_path: Any) -> None:
        raise WireError(
            "truncated",
            f"{_render(utf8_path) or 'string'}: length {n} out of range "
            f"({self.end - start} bytes left)",
        )

    def utf8_check(self, start: int, stop: int, path: Any) -> None:
        """Decode data[start:stop] unless no byte of it is non-ASCII."""
        if self.high < start:
            self.high = self.next_non_ascii(start)
        if self.high >= stop:
            return
        try:
            self.data[start:stop].decode("utf-8")
        except UnicodeDecodeError:
            raise WireError("bad_utf8", f"{_render(path)}: invalid UTF-8") from None

    def next_non_ascii(self, pos: int) -> int:
        """The offset of the first byte >= 0x80 at or after `pos`, else the end. The frame is
        mapped to 0/1 marks once (one C pass) so each lookup is a memchr."""
        if self.marks is None:
            self.marks = self.data.translate(_MARKS)
        found = self.marks.find(1, pos)
        return self.end if found < 0 else found

    def sequence(self, pos: int, extra: Any, depth: int, path: Any) -> int:
        etype = self.data[pos]
        (n,) = _I32.unpack_from(self.data, pos + 1)
        known = self.expect(path, extra, etype, "elements")
        self.count(pos + 5, n, (etype,), depth, path)
        pos += 5
        ktype, kextra = known if known is not None else (etype, None)
        if ktype == 12 and known is not None and n:  # a list of IDL structs (acks, jobs)
            if depth <= 1:
                raise WireError("too_deep", f"nested deeper than {self.limits.max_depth} levels")
            spec, fields = _fields(kextra), self.fields
            for i in range(n):
                pos = fields(pos, spec, depth - 1, (path, i))
            return pos
        for i in range(n):
            pos = self.value(pos, ktype, kextra, depth - 1, None if known is None else (path, i))
        return pos

    def mapping(self, pos: int, extra: Any, depth: int, path: Any) -> int:
        ktype, vtype = self.data[pos], self.data[pos + 1]
        (n,) = _I32.unpack_from(self.data, pos + 2)
        kspec = self.expect(path, None if extra is None else extra[0], ktype, "keys")
        vspec = self.expect(path, None if extra is None else extra[1], vtype, "values")
        self.count(pos + 6, n, (ktype, vtype), depth, path)
        pos += 6
        kt, ke = kspec if kspec is not None else (ktype, None)
        vt, ve = vspec if vspec is not None else (vtype, None)
        for i in range(n):
            pos = self.value(pos, kt, ke, depth - 1, None if kspec is None else (path, _KEY))
            pos = self.value(pos, vt, ve, depth - 1, None if vspec is None else (path, i))
        return pos

    @staticmethod
    def expect(path: Any, spec: Any, wire_type: int, what: str) -> tuple[int, Any] | None:
        """The IDL's (type, extra) for a known container's elements; None for unknown data.
        Raises type_mismatch when the wire says otherwise."""
        if path is None or spec is None:
            return None
        ttype, extra = _elem(spec)
        if _wire(ttype) != wire_type:
            raise WireError(
                "type_mismatch",
                f"{_render(path)}: {what} are "
                f"{_NAMES.get(wire_type, wire_type)}, expected "
                f"{_NAMES.get(_wire(ttype), ttype)}",
            )
        return ttype, extra

    def count(self, pos: int, n: int, types: tuple[int, ...], depth: int, path: Any) -> None:
        where = _render(path) or "container"
        for t in types:
            if t not in _MIN_WIDTH:
                raise WireError("bad_type", f"{where}: invalid element type id {t}")
        if n < 0:
            raise WireError("truncated", f"{where}: negative size {n}")
        if n > self.limits.max_items:
            raise WireError(
                "too_many_items",
                f"{where}: {n} entries is over the maximum of {self.limits.max_items}",
            )
        if n * sum(_MIN_WIDTH[t] for t in types) > self.end - pos:
            raise WireError(
                "truncated", f"{where}: {n} entries cannot fit in the {self.end - pos} bytes left"
            )
        if depth <= 0:
            raise WireError("too_deep", f"nested deeper than {self.limits.max_depth} levels")
