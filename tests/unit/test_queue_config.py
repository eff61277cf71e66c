"""Queue config and ServerSet files: both formats, every problem with its path, hot reload that
keeps the old config on a bad file, and the checks load_config runs before the port is bound."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pinlater.app import load_config
from pinlater.common.sections import ConfigError
from pinlater.ops.queue_settings import QueueConfigWatcher, parse_queue_config, read_server_count
from pinlater.ops.rate_limiter import QueueRateLimiter
from pinlater.ops.runtime_settings import RuntimeSettings
from tests.support.readme_blocks import blocks


def parse(text: str):
    return parse_queue_config(text, "qc")


def test_yaml_form_with_rates_claim_timeouts_and_fractions():
    config = parse(
        "queues:\n  a: {max_jobs_per_second: 10.5, claim_timeout_seconds: 300}\n"
        "  b: {max_jobs_per_second: 0}\n  c: {claim_timeout_seconds: 5}\n"
    )
    assert config.rates() == {"a": 10.5, "b": 0.0}
    assert config.queues["c"].claim_timeout_seconds == 5.0
    assert config.queues["c"].max_jobs_per_second is None


def test_original_json_form_ignores_extra_fields_inside_queue_config():
    text = json.dumps(
        {
            "queues": [
                {"name": "q", "queueConfig": {"maxJobsPerSecond": 5, "somethingElse": 1}},
                {"name": "r", "queueConfig": {"maxJobsPerSecond": 0.5, "claimTimeoutSeconds": 60}},
            ]
        }
    )
    config = parse(text)
    assert config.rates() == {"q": 5.0, "r": 0.5}
    assert config.queues["r"].claim_timeout_seconds == 60.0


def test_explicitly_empty_queue_list_means_no_limits():
    assert parse("queues: {}").rates() == {}


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", "the file is empty"),
        ("- 1\n- 2\n", "one key, 'queues'"),
        ("queues: {a: {max_jobs_per_second: -1}}", "queues.a.max_jobs_per_second: -1.0 is outside"),
        (
            "queues: {a: {max_jobs_per_second: .nan}}",
            "queues.a.max_jobs_per_second: must be a finite number",
        ),
        (
            "queues: {a: {max_jobs_per_second: fast}}",
            "queues.a.max_jobs_per_second: expected float",
        ),
        ("queues: {a: {rate: 1}}", "queues.a.rate: unknown key"),
        ("queues: {'bad-name': {max_jobs_per_second: 1}}", "'bad-name' is not a queue name"),
        (
            '{"queues": [{"name": "q", "queueConfig": {}}, {"name": "q", "queueConfig": {}}]}',
            "listed twice",
        ),
        ('{"queues": [{"nom": "q"}]}', "queues[0]: expected"),
        ("queues: 5", "queues: must be a mapping"),
    ],
)
def test_bad_files_name_the_offending_key(text, expected):
    with pytest.raises(ConfigError) as info:
        parse(text)
    assert any(expected in p for p in info.value.problems), info.value.problems


def test_every_problem_is_reported_at_once():
    with pytest.raises(ConfigError) as info:
        parse("queues: {a: {max_jobs_per_second: -1}, b: {claim_timeout_seconds: 0}}")
    assert len(info.value.problems) == 2


def test_server_set_counts_distinct_servers(tmp_path):
    path = tmp_path / "servers"
    path.write_text("127.0.0.1:9010\n# comment\n\n127.0.0.1:9011\n127.0.0.1:9010\n")
    assert read_server_count(str(path)) == 2
    path.write_text("\n# nobody\n")
    with pytest.raises(ConfigError, match="lists no servers"):
        read_server_count(str(path))
    path.write_text("not an endpoint\n")
    with pytest.raises(ConfigError, match="server_set_file"):
        read_server_count(str(path))


class Recorder:
    def __init__(self) -> None:
        self.changes: list = []
        self.errors: list[str] = []

    def change(self, config, servers):
        self.changes.append((config.rates(), servers))

    def error(self, kind):
        self.errors.append(kind)


def write(path, text):
    path.write_text(text)
    return str(path)


def test_watcher_applies_changes_and_keeps_the_old_config_on_a_bad_file(tmp_path):
    qc = write(tmp_path / "qc.yaml", "queues: {q: {max_jobs_per_second: 5}}")
    ss = write(tmp_path / "servers", "h1:1\n")
    rec = Recorder()
    watcher = QueueConfigWatcher(qc, ss, rec.change, rec.error)
    assert rec.changes == [({"q": 5.0}, 1)]
    assert watcher.check() is False  # nothing changed

    write(tmp_path / "qc.yaml", "queues: {q: {max_jobs_per_second: 7}}")
    assert watcher.check() is True
    assert rec.changes[-1] == ({"q": 7.0}, 1)

    write(tmp_path / "qc.yaml", "queues: {q: {max_jobs_per_second: -3}}")  # broken
    write(tmp_path / "servers", "")  # emptied
    assert watcher.check() is False
    assert rec.errors == ["queue_config", "server_set"]
    assert watcher.config.rates() == {"q": 7.0} and watcher.servers == 1

    write(tmp_path / "servers", "h1:1\nh2:1\nh3:1\n")
    assert watcher.check() is True
    assert rec.changes[-1] == ({"q": 7.0}, 3)


def test_a_deleted_file_keeps_the_current_config(tmp_path):
    qc = tmp_path / "qc.yaml"
    qc.write_text("queues: {q: {max_jobs_per_second: 5}}")
    rec = Recorder()
    watcher = QueueConfigWatcher(str(qc), None, rec.change, rec.error)
    qc.unlink()
    assert watcher.check() is False
    assert watcher.config.rates() == {"q": 5.0}


def test_claim_timeout_override_falls_back_to_the_global_one(tmp_path):
    qc = write(
        tmp_path / "qc.yaml",
        "queues: {slow: {claim_timeout_seconds: 3600}, fast: {max_jobs_per_second: 1}}",
    )
    settings = RuntimeSettings(None, QueueRateLimiter(), default_claim_timeout=600.0)
    QueueConfigWatcher(qc, None, settings.file_changed)
    assert settings.claim_timeout_for("slow") == 3600.0
    assert settings.claim_timeout_for("fast") == 600.0
    assert settings.claim_timeout_for("other") == 600.0


def test_load_config_reports_bad_queue_config_and_server_set_before_binding(tmp_path):
    qc = write(tmp_path / "qc.yaml", "queues: {q: {max_jobs_per_second: -1}}")
    with pytest.raises(ConfigError) as info:
        load_config(
            env={}, overrides={"queue_config": qc, "server_set_file": str(tmp_path / "missing")}
        )
    problems = "\n".join(info.value.problems)
    assert "queues.q.max_jobs_per_second" in problems
    assert "server_set_file: cannot use" in problems


def test_load_config_accepts_good_files_and_env_override(tmp_path):
    qc = write(
        tmp_path / "qc.json", '{"queues": [{"name": "q", "queueConfig": {"maxJobsPerSecond": 2}}]}'
    )
    ss = write(tmp_path / "servers", "127.0.0.1:9010\n")
    config = load_config(env={"PINLATER_QUEUE_CONFIG": qc, "PINLATER_SERVER_SET_FILE": ss})
    assert (config.queue_config, config.server_set_file) == (qc, ss)


def test_dequeue_cap_must_leave_workers_for_other_requests():
    with pytest.raises(
        ConfigError,
        match="admission.max_concurrent_dequeues: 8 must be below "
        r"server.worker_threads \(8\)",
    ):
        load_config(
            env={},
            overrides={
                "server": {"worker_threads": 8},
                "admission": {"max_concurrent_dequeues": 8},
            },
        )
    config = load_config(env={}, overrides={"server": {"worker_threads": 8}})
    assert config.admission.dequeue_cap(8) == 4
    assert config.admission.dequeue_cap_per_queue(8) == 4


def test_admission_and_request_log_sections_validate_their_keys():
    with pytest.raises(ConfigError) as info:
        load_config(
            env={},
            overrides={
                "admission": {"max_concurrent_requests": 0, "x": 1},
                "request_log": {"max_warnings_per_peer_per_minute": -1},
            },
        )
    problems = "\n".join(info.value.problems)
    assert "admission.max_concurrent_requests: 0 is outside" in problems
    assert "admission.x: unknown key" in problems
    assert "request_log.max_warnings_per_peer_per_minute" in problems


def test_the_readme_queue_config_parses_with_its_partitions():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    [block] = blocks(readme, "queue-config")
    config = parse(block)
    assert config.partitions() == {"avatars": 1, "payments": 1}
    assert config.fifo() == {"payments": 1}
    assert config.rates()["reports"] == 0 and config.unique_window_seconds("orders") == 3600
    with pytest.raises(ConfigError, match="partitions"):
        parse("queues: {a: {partitions: 0}}")


def test_fifo_queues_get_one_partition_and_their_cap():
    config = parse_queue_config(
        "queues:\n"
        "  a: {fifo: true}\n"
        "  b: {fifo: true, fifo_in_flight: 4, partitions: 1}\n"
        "  c: {partitions: 3}\n",
        "qc",
    )
    assert config.fifo() == {"a": 1, "b": 4}
    assert config.partitions() == {"a": 1, "b": 1, "c": 3}


@pytest.mark.parametrize(
    ("section", "problem"),
    [
        ("{fifo: true, partitions: 2}", "queues.a: fifo: true keeps the queue on one shard"),
        ("{fifo_in_flight: 2}", "queues.a.fifo_in_flight: only for a FIFO queue"),
        ("{fifo: true, fifo_in_flight: 0}", "queues.a.fifo_in_flight"),
    ],
)
def test_fifo_settings_that_cannot_hold_are_refused(section, problem):
    with pytest.raises(ConfigError) as info:
        parse_queue_config(f"queues:\n  a: {section}\n", "qc")
    assert any(problem in p for p in info.value.problems), info.value.problems
