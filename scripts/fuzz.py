#!/usr/bin/env python3
"""Coverage-guided fuzzing of the wire check and request validation with atheris, bounded in time.

    python scripts/fuzz.py                   # 60 s of atheris (pip install atheris)
    python scripts/fuzz.py --seconds 10
    python scripts/fuzz.py --engine hypothesis --examples 5000   # no atheris needed

The target (tests/fuzz/atheris_harness.py) runs in process: wire check -> thriftpy2 decode ->
the real handler on a throwaway SQLite store. atheris instruments only Python code, so the
pinlater package is imported under its instrumentation; thriftpy2's Cython decoder is exercised
but not coverage-guided. The seed corpus (valid arguments of every RPC) is written to a temp
dir. Exit status 0 = no finding; a finding prints the input and exits non-zero (atheris keeps
it as crash-<sha1> in the working directory).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=("atheris", "hypothesis"), default="atheris")
    parser.add_argument("--seconds", type=int, default=60, help="atheris: -max_total_time")
    parser.add_argument("--examples", type=int, default=2000, help="hypothesis: examples")
    return parser.parse_args(argv)


def run_atheris(seconds: int, work: Path) -> int:
    import atheris

    with atheris.instrument_imports(include=["pinlater"]):
        from tests.fuzz.atheris_harness import Target, seed_inputs
    corpus = work / "corpus"
    corpus.mkdir()
    for i, seed in enumerate(seed_inputs()):
        (corpus / f"seed-{i}").write_bytes(seed)
    target = Target(work / "data")
    atheris.Setup(
        [sys.argv[0], f"-max_total_time={seconds}", "-rss_limit_mb=2048", str(corpus)],
        target.one_input,
    )
    atheris.Fuzz()  # exits the process itself (0 when time ran out without a finding)
    return 0


def run_hypothesis(examples: int, work: Path) -> int:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from tests.fuzz.atheris_harness import Target, seed_inputs
    from tests.fuzz.mutations import MUTATION, apply

    target = Target(work / "data")
    seeds = seed_inputs()

    @settings(
        max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(seed=st.sampled_from(seeds), mutations=st.lists(MUTATION, min_size=1, max_size=6))
    def fuzz(seed: bytes, mutations: list) -> None:
        target.one_input(seed[:1] + apply(seed[1:], mutations))

    try:
        fuzz()
    finally:
        target.close()
    print(f"hypothesis: {examples} examples, no finding")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import logging

    logging.basicConfig(level=logging.CRITICAL)
    with tempfile.TemporaryDirectory(prefix="pinlater-fuzz-") as tmp:
        if args.engine == "atheris":
            return run_atheris(args.seconds, Path(tmp))
        return run_hypothesis(args.examples, Path(tmp))


if __name__ == "__main__":
    sys.exit(main())
