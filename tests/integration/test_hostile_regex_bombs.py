"""No body regex can crash the server (hostile load, item 1).

A real server whose address space is capped (`prlimit --as`, 1 GiB) gets a corpus of regex
bombs from 8 clients at once: huge and nested repeat counts (which made compiling allocate
gigabytes: the kernel killed the server), huge alternations, deep nesting, long patterns,
catastrophic backtracking, and patterns whose match state grows with the body (capture groups
inside repeats) over 256 KiB bodies. Every request is answered, refusals are UNKNOWN naming
`bodyRegexToMatch` and the bound, the server stays up and serving, logs no traceback, and its
peak RSS stays far below the cap. The corpus runs on SQLite: the filter is the same code for
every backend (test_hostile_regex.py runs the scans on each).
"""

from __future__ import annotations

import threading
from pathlib import Path

from pinlater.idl import ErrorCode, PinLaterException, RequestContext
from pinlater.idl import pinlater_thrift as t
from tests.support.server_process import ServerProcess

CTX = RequestContext(source="regex-bombs")
ADDRESS_SPACE_CAP = 1 << 30
#: peak RSS the server may reach over the whole corpus (it idles at ~60 MB, holds 8 MiB of
#: bodies, and compiled programs stay under ~3 MB, match state under ~100 MB in all)
PEAK_RSS_BOUND = 400 * 1024 * 1024
MAX_REGEX_LENGTH = 10_000  # the largest the config allows, so long patterns get through
CLIENTS = 8
#: long enough for match state to grow past 100 MB per evaluation without the per-body CPU
#: window; short enough that the scans' own copies of the bodies (each request holds a page of
#: them: the backends page by rows, not bytes) do not dominate the peak
BIG_BODY = 256 * 1024

#: (pattern, the refusal's message must contain this; None = any answer, or a budget refusal)
COMPILE_BOMBS = [
    ("a{99999999}", "limits.max_regex_size"),
    ("(?:(?:a{100}){100}){100}", "limits.max_regex_size"),
    ("(?:a{1000}){1000}", "limits.max_regex_size"),
    ("[ab]{1000000}", "limits.max_regex_size"),
    ("(a){1000000}", "limits.max_regex_size"),
    ("(?:ab|cd){65535}", "limits.max_regex_size"),
    ("(?:a{1000,}){1000,}", "limits.max_regex_size"),
    ("(a{1000}(?R)?){1000}", "limits.max_regex_size"),
    ("(?=(?:a{1000}){1000})b", "limits.max_regex_size"),
    ("a{4294967296}", "invalid regular expression"),
    ("(?:" + "|".join(f"x{i}" for i in range(1500)) + "){2}", "limits.max_regex_size"),
    ("(" * 3000 + "a" + ")" * 3000, "nested more than"),
    ("(?=" * 60 + "a" + ")" * 60, "nested more than"),
    ("(?:" * 20 + "a" + ")+" * 20, "limits.max_regex_size"),  # 670 MB to compile: x+ is xx*
    ("(?:" * 12 + "a" + "){2}" * 12, "limits.max_regex_size"),  # 209 MB
    ("a" * (MAX_REGEX_LENGTH + 1), "longer than"),
]
MATCH_BOMBS = [
    "|".join(f"x{i}y" for i in range(1500)),  # a long alternation within the bounds
    "(?:" + "|".join(f"a{i}" for i in range(1800)) + ")+$",
    "(x+x+)+y",
    "(.*a){12}x",
    "(a|aa)+$",
    "(a|a?)+b",
    "(?:a*)*b",
    "((((((((((((((((((((a))))))))))))))))))))*$",  # match state grows per repetition
    "((a)|(b))*$",
    "(a)*$",
    "(?:(a)|b)*+$",
    "(?:aaaa){e<=3}$",  # fuzzy matching
    "(?:.*?){1000}x",
]


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/PID/status")


class CappedServer(ServerProcess):
    """The server under `prlimit --as`: an allocation past the cap fails in the process
    (MemoryError) instead of growing until the kernel kills it."""

    def command(self) -> list[str]:
        return ["prlimit", f"--as={ADDRESS_SPACE_CAP}", "--", *super().command()]


def answer(client, queue: str, pattern: str) -> str:
    """'ok', or the message of the UNKNOWN error a count over `queue` answered."""
    request = t.PinLaterGetJobCountRequest(queueName=queue, jobState=0, bodyRegexToMatch=pattern)
    try:
        client.getJobCount(CTX, request)
    except PinLaterException as exc:
        assert exc.errorCode == ErrorCode.UNKNOWN, exc.message
        return exc.message
    return "ok"


def test_a_memory_capped_server_survives_a_corpus_of_regex_bombs(tmp_path):
    config = {
        "janitor": {"enabled": False},
        "server": {"worker_threads": 16},
        "limits": {"max_regex_length": MAX_REGEX_LENGTH, "regex_request_cpu_seconds": 0.5},
    }
    # one malloc arena per thread would reserve 64 MB of address space each, which the cap
    # counts although it is never touched
    with CappedServer(config, tmp_path, env={"MALLOC_ARENA_MAX": "2"}) as server:
        setup = server.client()
        _fill_big_and_small(setup)
        work = [(q, p, must) for p, must in COMPILE_BOMBS for q in ("small",)]
        work += [(q, p, None) for p in MATCH_BOMBS for q in ("big", "small")]
        answers = _answers_from_concurrent_clients(server, work)
        assert server.is_running(), server.log()[-3000:]
        assert len(answers) == len(work)
        for queue, pattern, must in work:
            _assert_refused_or_served(answers[(queue, pattern)], pattern, must)
        assert setup.getJobCount(CTX, t.PinLaterGetJobCountRequest(queueName="big", jobState=0))
        assert answer(setup, "small", "^a+$") == "ok"  # still serving body regexes
        setup.close()
        peak = peak_rss(server.pid)
        assert peak < PEAK_RSS_BOUND, f"peak RSS {peak / 2**20:.0f} MiB"
        print(f"server peak RSS over the corpus: {peak / 2**20:.0f} MiB")
        assert "Traceback" not in server.log()
        assert "MemoryError" not in server.log()


def _fill_big_and_small(client) -> None:
    """Queue `big`: 8 bodies of BIG_BODY bytes; queue `small`: 200 bodies of 100 bytes."""
    for queue, body, count in (("big", b"a" * BIG_BODY, 8), ("small", b"a" * 100, 200)):
        client.createQueue(CTX, queue)
        jobs = [t.PinLaterJob(body=body) for _ in range(count)]
        client.enqueueJobs(CTX, t.PinLaterEnqueueRequest(queueName=queue, jobs=jobs))


def _answers_from_concurrent_clients(
    server: ServerProcess, work: list[tuple[str, str, str | None]]
) -> dict[tuple[str, str], str]:
    """CLIENTS clients each count over every (queue, pattern) of `work`, each starting at a
    different offset so the bombs overlap; the first answer per (queue, pattern) is kept."""
    answers: dict[tuple[str, str], str] = {}
    lock = threading.Lock()

    def client_run(offset: int) -> None:
        client = server.client(timeout=60)
        try:
            for queue, pattern, _ in work[offset:] + work[:offset]:
                got = answer(client, queue, pattern)
                with lock:
                    answers.setdefault((queue, pattern), got)
        finally:
            client.close()

    clients = [
        threading.Thread(target=client_run, args=(i * len(work) // CLIENTS,))
        for i in range(CLIENTS)
    ]
    for thread in clients:
        thread.start()
    for thread in clients:
        thread.join(300)
    return answers


def _assert_refused_or_served(got: str, pattern: str, must: str | None) -> None:
    """A compile bomb is refused naming the field and its reason (`must`); a match bomb is
    answered or refused naming the field, never anything else."""
    if must is not None:
        assert got.startswith("bodyRegexToMatch: ") and must in got, (pattern[:40], got)
    else:
        assert got == "ok" or got.startswith("bodyRegexToMatch: "), (pattern[:40], got)
