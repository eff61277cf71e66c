"""The README's tour and worker examples, run as written against a real server.

The blocks are read from README.md (tests/support/readme_blocks.py), so the README and this test
cannot drift apart. Shell blocks run in one bash session per test, in a temp directory holding
`.venv/bin/pinlater` and `.venv/bin/pinlater-worker` (this test run's console scripts), with
$PINLATER_SERVERS and $PINLATER_METRICS_PORT pointing at the test server the way a user's
defaults point at `./scripts/serve`'s. The tour runs on SQLite, Redis and MySQL (as the README
says), the worker examples on SQLite.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from pinlater.cli.main import main as cli_main
from tests.support import readme_blocks
from tests.support.server_process import REPO_ROOT, ServerProcess, free_port
from worker_sdk import JobState, PinLaterClient

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
STEP_MARK = "@@readme-step-{}@@"
TOUR_SECONDS = 120


def console_scripts(workdir: Path) -> None:
    """`.venv/bin/pinlater[-worker]` in `workdir`: this interpreter's console scripts when
    installed, else equivalent `python -m` wrappers."""
    bin_dir = workdir / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    modules = {"pinlater": "pinlater.cli", "pinlater-worker": "worker_sdk.worker_cli"}
    for name, module in modules.items():
        installed = Path(sys.executable).parent / name
        target = bin_dir / name
        if installed.exists():
            target.symlink_to(installed)
        else:
            target.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m {module} "$@"\n')
            target.chmod(0o755)


def shell_env(server: ServerProcess, metrics_port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PINLATER_")}
    env.update(
        PINLATER_SERVERS=f"{server.host}:{server.port}",
        PINLATER_METRICS_PORT=str(metrics_port),
        PYTHONPATH=str(REPO_ROOT),
        PYTHONUNBUFFERED="1",
    )
    return env


def run_blocks(
    names: list[str], workdir: Path, env: dict[str, str], any_shard: bool, text: str = README
) -> None:
    """Run the named blocks' commands (of the README, or `text`) in one bash session; fail
    listing every mismatch."""
    steps = [
        step
        for name in names
        for block in readme_blocks.blocks(text, name)
        for step in readme_blocks.shell_steps(block)
    ]
    script = ["exec 2>&1"]
    for i, step in enumerate(steps):
        script += [f"echo {STEP_MARK.format(i)}", step.command]
    done = subprocess.run(
        ["bash", "-c", "\n".join(script)],
        cwd=workdir,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TOUR_SECONDS,
    )
    outputs = re.split(r"^@@readme-step-\d+@@\n", done.stdout, flags=re.M)[1:]
    assert len(outputs) == len(steps), f"the session stopped early:\n{done.stdout}"
    problems = [
        f"$ {step.command}\n--- expected\n" + "\n".join(step.expected) + f"\n--- got\n{got}"
        for step, got in zip(steps, outputs, strict=True)
        if not readme_blocks.output_matches(step.expected, got, any_shard)
    ]
    assert not problems, "README output differs:\n\n" + "\n\n".join(problems)


@pytest.mark.parametrize("kind", ["sqlite", "redis", "mysql"])
def test_the_tour_runs_as_written(kind, tmp_path):
    metrics_port = free_port()
    console_scripts(tmp_path)
    if kind == "sqlite":
        with ServerProcess({"metrics": {"port": metrics_port}}, tmp_path) as server:
            run_blocks(["tour"], tmp_path, shell_env(server, metrics_port), any_shard=False)
        return
    config = yaml.safe_load((REPO_ROOT / "configs" / f"{kind}.local.yaml").read_text())
    config.pop("server", None)
    config["metrics"] = {"port": metrics_port}
    if kind == "redis":
        from tests.support import redis_env

        storage = redis_env.running_server(tmp_path / "redis")
    else:
        from tests.support import mysql_env

        storage = mysql_env.running_server(tmp_path / "mariadb")
    with storage as store:
        for shard in config["backend"]["shards"]:
            shard.update(host="127.0.0.1", port=store.port)
        with ServerProcess(config, tmp_path) as server:
            run_blocks(["tour"], tmp_path, shell_env(server, metrics_port), any_shard=True)


def test_the_worker_command_line_example_runs_as_written(tmp_path):
    metrics_port = free_port()
    console_scripts(tmp_path)
    with ServerProcess({"metrics": {"port": metrics_port}}, tmp_path) as server:
        env = shell_env(server, metrics_port)
        env["P"] = ".venv/bin/pinlater"  # "P as in the tour"
        run_blocks(["worker-cli"], tmp_path, env, any_shard=False)


def test_the_worker_snippet_runs_as_written(tmp_path):
    [snippet] = readme_blocks.blocks(README, "worker-snippet")
    [expected_block] = readme_blocks.blocks(README, "worker-snippet-output")
    expected = [line for line in expected_block.splitlines() if line.strip()]
    with ServerProcess({}, tmp_path) as server:
        address = f"{server.host}:{server.port}"
        assert snippet.count('"127.0.0.1:9010"') == 1
        (tmp_path / "worker.py").write_text(snippet.replace("127.0.0.1:9010", address))
        env = {k: v for k, v in os.environ.items() if not k.startswith("PINLATER_")}
        env.update(PYTHONPATH=str(REPO_ROOT), PYTHONUNBUFFERED="1")
        log_path = tmp_path / "worker-output.txt"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "worker.py"],
                cwd=tmp_path,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            client = PinLaterClient([address])
            _wait(lambda: "emails" in client.queue_names(), "the snippet creates its queue")
            _enqueue_as_the_readme_says(address)

            def printed_everything() -> bool:
                lines = log_path.read_text().splitlines()
                return all(
                    any(readme_blocks.line_matches(want, got) for got in lines) for want in expected
                )

            _wait(printed_everything, f"the snippet prints {expected}", log_path)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0, log_path.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        assert "worker stopped: 3 dequeued, 1 succeeded, 2 failed" in log_path.read_text()
        found = client.lookup(
            ["emails:s1:p1:1", "emails:s1:p1:2", "emails:s1:p1:3"], include_body=True
        )
        assert {i.body: (i.state, i.attempts_remaining) for i in found.values()} == {
            b"alice@example.com": (JobState.SUCCEEDED, 2),
            b"nobody": (JobState.FAILED, 0),
            b"bob@example.invalid": (JobState.PENDING, 1),
        }
        client.close()


def _enqueue_as_the_readme_says(address: str) -> None:
    """Run the enqueue command the README gives for the snippet (its `$P` is `pinlater`)."""
    match = re.search(r"`\$P (enqueue --queue emails [^`]*)`", README)
    assert match, "README: the snippet's enqueue command is missing"
    argv = shlex.split(" ".join(match.group(1).split()))
    assert cli_main(["--servers", address, *argv]) == 0


def _wait(predicate, what: str, log_path: Path | None = None, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    output = log_path.read_text() if log_path else ""
    raise AssertionError(f"timed out waiting until {what}\n{output}")
