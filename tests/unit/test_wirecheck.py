"""pinlater.server.wirecheck: one rule per test, on hand-built argument structs."""

from __future__ import annotations

import time

import pytest

from pinlater.idl import PinLater
from pinlater.server.wirecheck import WireError, WireLimits, check_args, check_struct
from tests.fuzz.wire import (
    I32,
    I64,
    LIST,
    MAP,
    SET,
    STRING,
    STRUCT,
    context,
    field,
    i32,
    list_,
    request,
    string,
    struct_,
    valid_calls,
)

ENQ = PinLater.enqueueJobs_args
LOOKUP = PinLater.lookupJobs_args


def reason(data: bytes, cls=ENQ, limits: WireLimits | None = None) -> str:
    limits = limits or WireLimits()
    with pytest.raises(WireError) as info:
        check_args(data, 0, cls, limits)
    return info.value.reason


def args_offset(payload: bytes) -> int:
    return 12 + int.from_bytes(payload[4:8], "big")


@pytest.mark.parametrize("method", sorted(PinLater.thrift_services))
def test_valid_calls_of_every_rpc_pass_and_end_at_the_stop_byte(method):
    payload = valid_calls()[method]
    cls = getattr(PinLater, method + "_args")
    assert check_args(payload, args_offset(payload), cls) == len(payload)


@pytest.mark.parametrize("ttype", [1, 5, 7, 9, 16, 17, 18, 19, 127, 255])
def test_unknown_field_type_ids_are_rejected(ttype):
    assert reason(struct_(context(), bytes([ttype]) + b"\x00\x07" + i32(0))) == "bad_type"


@pytest.mark.parametrize("etype", [0, 1, 19])
def test_unknown_element_type_ids_are_rejected_even_in_empty_containers(etype):
    assert reason(struct_(field(LIST, 9, bytes([etype]) + i32(0)))) == "bad_type"
    assert reason(struct_(field(MAP, 9, bytes([STRING, etype]) + i32(0)))) == "bad_type"


def test_nesting_is_limited_to_max_depth():
    nested = b"\x00"
    for _ in range(200):
        nested = field(STRUCT, 1, nested) + b"\x00"
    assert reason(nested, None) == "too_deep"
    shallow = b"\x00"
    for _ in range(10):
        shallow = field(STRUCT, 1, shallow) + b"\x00"
    assert check_args(shallow, 0, None) == len(shallow)
    assert reason(shallow, None, WireLimits(max_depth=5)) == "too_deep"


def test_deeply_nested_lists_are_limited_too():
    nested = list_(I32, [])
    for _ in range(40):
        nested = list_(LIST, [nested])
    assert reason(struct_(field(LIST, 9, nested)), None) == "too_deep"


@pytest.mark.parametrize("length", [-5, -1, 2**30, 2**31 - 1, 4])
def test_string_length_past_the_frame_end_is_rejected(length):
    data = struct_(field(STRING, 9, i32(length) + b"abc"))
    assert reason(data) == "truncated"


@pytest.mark.parametrize("etype", [I32, STRING, STRUCT, LIST])
def test_container_count_larger_than_the_bytes_left_is_rejected_at_once(etype):
    data = struct_(field(LIST, 9, bytes([etype]) + i32(2**31 - 1)))
    started = time.perf_counter()
    assert reason(data, limits=WireLimits(max_items=2**31 - 1)) == "truncated"
    assert time.perf_counter() - started < 0.01


def test_unknown_map_of_2_pow_31_entries_the_ten_second_stall_is_rejected_at_once():
    data = struct_(context(), field(MAP, 99, bytes([STRING, STRING]) + i32(2**31 - 1)))
    started = time.perf_counter()
    assert reason(data) == "too_many_items"
    assert time.perf_counter() - started < 0.01


def test_containers_over_max_items_are_rejected_known_or_unknown():
    small = WireLimits(max_items=3)
    jobs = [struct_(field(STRING, 1, string(b"b")))] * 4
    assert (
        reason(
            struct_(request(field(STRING, 1, string("q")), field(LIST, 2, list_(STRUCT, jobs)))),
            limits=small,
        )
        == "too_many_items"
    )
    assert (
        reason(struct_(field(SET, 77, list_(I32, [i32(1)] * 4))), limits=small) == "too_many_items"
    )
    ok = struct_(request(field(STRING, 1, string("q")), field(LIST, 2, list_(STRUCT, jobs[:3]))))
    assert check_args(ok, 0, ENQ, small) == len(ok)


def test_invalid_utf8_in_a_string_field_is_named_by_its_path():
    data = struct_(
        context(),
        request(
            field(STRING, 1, string("q")),
            field(
                LIST,
                2,
                list_(
                    STRUCT,
                    [
                        struct_(field(STRING, 1, string(b"ok"))),
                        struct_(field(STRING, 5, string(b"\xc3\x28"))),
                    ],
                ),
            ),
        ),
    )
    with pytest.raises(WireError) as info:
        check_args(data, 0, ENQ)
    assert (info.value.reason, str(info.value)) == (
        "bad_utf8",
        "request.jobs[1].customStatus: invalid UTF-8",
    )


@pytest.mark.parametrize("bad", [b"ok\x80", b"\x80ok"])
@pytest.mark.parametrize("before", [b"", b"\xff\xfe", "é".encode()])
def test_invalid_utf8_is_found_wherever_the_frame_has_other_non_ascii_bytes(before, bad):
    """Strings of an ASCII stretch are not decoded: a non-ASCII byte elsewhere (a binary body,
    a valid multi-byte string) must not hide a bad string or flag a good one."""
    body = field(STRING, 1, string(before))  # binary: any bytes
    good = struct_(body, field(STRING, 5, string("ok " * 50)))
    jobs = [good] * 3 + [struct_(body, field(STRING, 5, string(bad)))] + [good]
    data = struct_(
        context(), request(field(STRING, 1, string("q")), field(LIST, 2, list_(STRUCT, jobs)))
    )
    with pytest.raises(WireError) as info:
        check_args(data, 0, ENQ)
    assert str(info.value) == "request.jobs[3].customStatus: invalid UTF-8"
    fine = struct_(
        context("sourcé"),
        request(field(STRING, 1, string("q")), field(LIST, 2, list_(STRUCT, [good] * 5))),
    )
    assert check_args(fine, 0, ENQ) == len(fine)


def test_binary_fields_and_unknown_fields_may_hold_any_bytes():
    body = field(STRING, 1, string(b"\xff\xfe\x00"))  # PinLaterJob.body is binary
    data = struct_(
        request(field(STRING, 1, string("q")), field(LIST, 2, list_(STRUCT, [struct_(body)]))),
        field(STRING, 50, string(b"\xff")),
    )
    assert check_args(data, 0, ENQ) == len(data)


def test_known_list_with_other_element_type_is_a_type_mismatch():
    data = struct_(request(field(LIST, 1, list_(I64, [b"\x00" * 8]))))
    with pytest.raises(WireError) as info:
        check_args(data, 0, LOOKUP)
    assert info.value.reason == "type_mismatch"
    assert str(info.value) == "request.jobDescriptors: elements are i64, expected string"


def test_a_known_field_with_a_wrong_wire_type_is_only_walked():
    data = struct_(field(I32, 1, i32(5)), request(field(I32, 1, i32(3))))
    assert check_args(data, 0, ENQ) == len(data)


@pytest.mark.parametrize("cut", [1, 3, 5, 10])
def test_truncated_structs_are_rejected(cut):
    payload = valid_calls()["enqueueJobs"]
    start = args_offset(payload)
    assert reason(payload[start:-cut]) == "truncated"


def test_structural_check_without_idl_knowledge():
    assert check_struct(struct_(field(STRING, 1, string(b"\xff"))), 0) == 9
    with pytest.raises(WireError):
        check_struct(b"\x0b\x00\x01", 0)


def test_cost_is_linear_and_small_for_a_large_enqueue():
    job = struct_(field(STRING, 1, string(b"x" * 100)), field(STRING, 5, string("status")))
    data = struct_(
        context(),
        request(field(STRING, 1, string("q")), field(LIST, 2, list_(STRUCT, [job] * 1000))),
    )
    started = time.perf_counter()
    assert check_args(data, 0, ENQ) == len(data)
    assert time.perf_counter() - started < 0.1
