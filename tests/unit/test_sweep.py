"""Round-robin slices of a changing set of queue names, and the spacing of their ticks."""

from __future__ import annotations

import pytest

from pinlater.ops.sweep import MIN_TICK_SECONDS, Sweep


def test_a_sweep_hands_out_every_name_once_in_slices_then_starts_again():
    sweep = Sweep(per_tick=3, interval=6.0)
    names = [f"q{i}" for i in range(8)]
    assert sweep.starting
    slices = [sweep.next_slice(names) for _ in range(3)]
    assert slices == [["q0", "q1", "q2"], ["q3", "q4", "q5"], ["q6", "q7"]]
    assert sweep.starting  # the short slice ended the sweep
    assert sweep.next_slice(names) == ["q0", "q1", "q2"]
    assert sweep.wait_seconds() == pytest.approx(2.0)  # 3 ticks per sweep of 6 s


def test_names_created_or_deleted_meanwhile_neither_stall_nor_repeat_the_sweep():
    sweep = Sweep(per_tick=2, interval=1.0)
    assert sweep.next_slice(["b", "d", "f"]) == ["b", "d"]
    # "d" deleted, "c" (before the resume point) and "e" created
    assert sweep.next_slice(["b", "c", "e", "f"]) == ["e", "f"]
    assert sweep.starting
    assert sweep.next_slice([]) == [] and sweep.starting


def test_a_slice_that_ends_exactly_at_the_last_name_ends_the_sweep():
    sweep = Sweep(per_tick=2, interval=1.0)
    assert sweep.next_slice(["a", "b", "c", "d"]) == ["a", "b"]
    assert sweep.next_slice(["a", "b", "c", "d"]) == ["c", "d"]
    assert sweep.starting


def test_ticks_spread_a_sweep_over_the_interval_but_never_closer_than_the_floor():
    sweep = Sweep(per_tick=10, interval=2.0)
    sweep.next_slice(["q"] * 5)
    assert sweep.wait_seconds() == 2.0  # one tick per sweep: the plain interval
    sweep.next_slice([f"q{i}" for i in range(10_000)])
    assert sweep.wait_seconds() == MIN_TICK_SECONDS
    with pytest.raises(ValueError):
        Sweep(per_tick=0, interval=1.0)
