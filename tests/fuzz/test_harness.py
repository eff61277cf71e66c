"""The atheris harness's target under plain Hypothesis: mutated valid arguments and raw bytes
through the wire check, thriftpy2 and the real handler on SQLite, in process. Bounded."""

from __future__ import annotations

import logging

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.atheris_harness import Target, seed_inputs
from tests.fuzz.mutations import MUTATION, apply

SEEDS = seed_inputs()


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    logging.getLogger("pinlater").setLevel(logging.CRITICAL)  # rejections are expected here
    running = Target(tmp_path_factory.mktemp("harness"))
    yield running
    running.close()
    logging.getLogger("pinlater").setLevel(logging.NOTSET)


def test_seeds_pass_through_the_harness(target):
    for seed in SEEDS:
        target.one_input(seed)


@settings(
    max_examples=300,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(seed=st.sampled_from(SEEDS), mutations=st.lists(MUTATION, min_size=1, max_size=5))
def test_mutated_arguments_never_cause_an_internal_error(target, seed, mutations):
    target.one_input(seed[:1] + apply(seed[1:], mutations))


@settings(
    max_examples=200,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.binary(max_size=200))
def test_random_argument_bytes_never_cause_an_internal_error(target, data):
    target.one_input(data)
