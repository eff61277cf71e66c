"""Hypothesis byte mutation of valid calls of every RPC, sent to a real server subprocess.

For every case the server must reply or close the connection within the deadline (the frame
deadline covers a lying frame header; the client half-closes after sending so a short frame
ends in EOF), must never answer INTERNAL_ERROR or a PinLaterException saying "internal error",
and must still be alive and serving afterwards. Bounded: 200 derandomized examples.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from pinlater.idl import RequestContext
from tests.fuzz.client import exchange, internal_errors
from tests.fuzz.conftest import FRAME_DEADLINE
from tests.fuzz.mutations import SEEDS, mutated_frames
from tests.fuzz.wire import frame

DEADLINE = FRAME_DEADLINE + 1.0


def test_seeds_are_served_normally(fuzz_server):
    for method, payload in SEEDS.items():
        outcome = exchange(fuzz_server.host, fuzz_server.port, frame(payload), DEADLINE)
        assert outcome.replies and not internal_errors(outcome), method


@settings(
    max_examples=200,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=mutated_frames())
def test_mutated_calls_get_a_reply_or_a_close_never_an_internal_error(fuzz_server, case):
    method, data = case
    outcome = exchange(fuzz_server.host, fuzz_server.port, data, DEADLINE)
    assert outcome.closed or outcome.replies, f"{method}: no reply and no close in {DEADLINE}s"
    assert internal_errors(outcome) == [], (method, data)


def test_server_survives_the_mutation_run(fuzz_server):
    assert fuzz_server.is_running()
    client = fuzz_server.client(timeout=5)
    client.getQueueNames(RequestContext(source="after-fuzz"))
    client.close()
