"""Typed, frozen configuration: YAML file, then PINLATER_* environment, then command-line flags.

Everything is validated once, before the port is bound, and every problem is reported at once
with its key path. Nothing else in the code reads raw config keys.
"""

from __future__ import annotations

import dataclasses
import os
import re
import ssl
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pinlater.common.logs import FORMATS as LOG_FORMATS
from pinlater.common.passwords import parse_password_hash
from pinlater.common.sections import ConfigError, build_section, coerce, hint
from pinlater.common.sections import field_range as _range
from pinlater.common.tls import server_context
from pinlater.common.wire_size import largest_single_job_reply
from pinlater.storage.claims import CLAIM_SOURCE_OFFSET
from pinlater.storage.contract import Backend, ShardSpec, StorageLimits
from pinlater.storage.shard_map import parse_shard_map

#: server.role values: which RPCs a server answers (enqueue refuses dequeueJobs, dequeue
#: refuses enqueueJobs; pinlater/handler/handler.py)
ROLES = ("all", "enqueue", "dequeue")

_CLUSTER_NAME = re.compile(r"[A-Za-z0-9_]{1,32}", re.ASCII)

#: the composition root's registry: backend kind -> Backend class (KeyError naming the choices)
BackendResolver = Callable[[str], type[Backend]]
#: extra whole-config checks run by load_config (e.g. the per-queue settings files)
ConfigCheck = Callable[["Config"], list[str]]


@dataclass(frozen=True)
class TlsConfig:
    """TLS on the Thrift port (`server.tls`); off by default. See pinlater/tls.py."""

    enabled: bool = False
    #: PEM certificate chain of the server (required when enabled)
    cert_file: str | None = None
    #: PEM private key; None = the key is in cert_file
    key_file: str | None = None
    #: PEM CA bundle for client certificates; set = mutual TLS (clients without one are refused)
    client_ca_file: str | None = None
    #: the whole handshake of one connection must finish within this long
    handshake_timeout_seconds: float = field(default=5.0, metadata=_range(0.05, 300))


@dataclass(frozen=True)
class ServerConfig:
    """The Thrift listener and its connection limits (pinlater.server.reactor).

    Idle connections cost no thread (one selector thread holds them), so the cap is set by
    memory and file descriptors: about 2 KiB of server RSS per idle plain connection and 16 KiB
    per idle TLS connection, measured with 5,000 (`scripts/bench_hostile.py --memory`; with a
    thread per connection it was 35 and 74 KiB). The server raises its soft open-file limit to
    fit max_connections.
    """

    host: str = "127.0.0.1"
    port: int = field(default=9010, metadata=_range(0, 65535))
    #: largest Thrift frame, both ways: a request's length is checked from its 4-byte header
    #: before any allocation, and every reply is sized to fit (a dequeue hands out fewer jobs,
    #: a lookup that cannot fit is refused); must hold one job at the body and status caps
    max_frame_bytes: int = field(default=16 * 1024 * 1024, metadata=_range(1024, 1 << 30))
    #: connections open at once; beyond it (with none idle to evict) a new one is closed at once
    max_connections: int = field(default=10_000, metadata=_range(1, 1_000_000))
    #: connections from one client IP address; its next one is refused
    max_connections_per_peer: int = field(default=1000, metadata=_range(1, 1_000_000))
    #: from this fraction of max_connections on, a new connection evicts the connection idle the
    #: longest, and idle connections close after idle_timeout_near_cap_seconds
    connections_high_water: float = field(default=0.9, metadata=_range(0.01, 1))
    #: a connection must have been idle this long to be evicted (one in use never is)
    evict_idle_min_seconds: float = field(default=1.0, metadata=_range(0, 86_400))
    #: an idle client connection is closed after this long
    idle_timeout_seconds: float = field(default=300.0, metadata=_range(0.1, 86_400))
    #: the idle timeout while the server is at or above the high-water mark
    idle_timeout_near_cap_seconds: float = field(default=10.0, metadata=_range(0.1, 86_400))
    #: a frame, once started, must arrive completely within this long (slowloris bound); a
    #: reply must be taken by the peer within this long too
    frame_read_timeout_seconds: float = field(default=10.0, metadata=_range(0.1, 3600))
    #: slow connections (half a frame in, a reply not taken, a TLS handshake unfinished) at
    #: once; over it the oldest is closed
    max_slow_connections: int = field(default=1024, metadata=_range(1, 1_000_000))
    #: slow connections of one client IP address; over it its oldest is closed
    max_slow_connections_per_peer: int = field(default=64, metadata=_range(1, 1_000_000))
    #: threads that serve connections with a request in progress (started when needed)
    connection_threads: int = field(default=256, metadata=_range(1, 4096))
    #: after a reply, the thread waits this long for the connection's next request before
    #: handing it to the selector (0: at once); at most half the threads linger at a time
    thread_linger_seconds: float = field(default=0.2, metadata=_range(0, 10))
    #: threads that run requests (the rest of the connections wait for a free one)
    worker_threads: int = field(default=32, metadata=_range(1, 4096))
    #: on SIGTERM/SIGINT, in-flight requests get this long to finish
    shutdown_grace_seconds: float = field(default=10.0, metadata=_range(0, 3600))
    #: what this server answers: `all`; `enqueue` (enqueues, acks, reads and admin calls;
    #: dequeueJobs refused) or `dequeue` (everything but enqueueJobs), for separate pools
    role: str = "all"
    #: handler slots kept for enqueueJobs alone (on top of worker_threads), so that no
    #: dequeue storm or slow dequeue path delays an enqueue; 0 = enqueues share worker_threads
    enqueue_worker_threads: int = field(default=8, metadata=_range(0, 4096))
    #: the longest a long-poll dequeue (PinLaterDequeueRequest.waitMillis) is held when no
    #: job is eligible; a longer wait is capped to it. 0 turns long-poll off (answers at once)
    max_dequeue_wait_ms: int = field(default=20_000, metadata=_range(0, 600_000))
    #: the longest interval between two checks of a queue with parked dequeues for jobs this
    #: server did not see arrive (enqueued through another server, delayed jobs): one storage
    #: call per shard per check, backing off from 100 ms to this
    long_poll_check_max_ms: int = field(default=1000, metadata=_range(100, 1000))
    tls: TlsConfig = TlsConfig()


@dataclass(frozen=True)
class LimitsConfig:
    body_max_bytes: int = field(default=1024 * 1024, metadata=_range(1, 64 * 1024 * 1024))
    custom_status_max_chars: int = field(default=5000, metadata=_range(1, 1_000_000))
    max_jobs_per_request: int = field(default=10_000, metadata=_range(1, 1_000_000))
    max_dequeue_limit: int = field(default=10_000, metadata=_range(1, 1_000_000))
    max_scan_limit: int = field(default=1000, metadata=_range(1, 1_000_000))
    #: getJobCount is exact up to this many jobs
    count_cap: int = field(default=1_000_000, metadata=_range(1, 2**31 - 1))
    max_attempts: int = field(default=1000, metadata=_range(1, 2**31 - 1))
    max_queue_name_length: int = field(default=100, metadata=_range(1, 1000))
    #: PinLaterJob.uniqueKey, printable ASCII; 1024 is what the MySQL key column holds (the
    #: keys of periodic jobs, `cron:<name>:<time>`, need up to 90)
    max_unique_key_length: int = field(default=256, metadata=_range(90, 1024))
    max_source_length: int = field(default=200, metadata=_range(1, 200))
    #: body regexes (bodyRegexToMatch of getJobCount, scanJobs, deleteJobs); see
    #: pinlater/handler/body_filter.py. Longest pattern, in characters:
    max_regex_length: int = field(default=256, metadata=_range(1, 10_000))
    #: largest compiled pattern, in nodes once the engine has copied its repeats (`a{1000}` is
    #: ~1,000, `(?:a{100}){100}` ~10,000, `(?:(?:a)+)+` doubles per level; at most ~300 bytes
    #: each); checked on the parse tree before compiling
    max_regex_size: int = field(default=10_000, metadata=_range(100, 100_000))
    #: CPU time the evaluation of one body may use (the thread's CPU time, so load cannot make
    #: a cheap pattern fail); also the engine timeout of each attempt, which bounds its match
    #: memory (up to ~0.75 GB per CPU second), hence the 1 s ceiling
    regex_timeout_seconds: float = field(default=0.05, metadata=_range(0.001, 1))
    #: CPU time one request's body-regex scan may use: its evaluations and the paging between
    #: them, in every thread that scans for it
    regex_request_cpu_seconds: float = field(default=2.0, metadata=_range(0.01, 600))
    #: wall-clock time one request with a body regex may take, counted from when its filter is
    #: built (the scan holds a worker thread and a read snapshot)
    regex_request_seconds: float = field(default=10.0, metadata=_range(0.1, 3600))
    #: bodies one request may examine with its regex, over all shards and priorities
    regex_scan_cap: int = field(default=100_000, metadata=_range(1, 100_000_000))
    #: body bytes one request may examine with its regex, over all shards and priorities
    regex_scan_bytes: int = field(default=64 * 1024 * 1024, metadata=_range(1024, 1 << 40))


@dataclass(frozen=True)
class PrioritiesConfig:
    levels: int = field(default=3, metadata=_range(1, 100))


@dataclass(frozen=True)
class ShardingConfig:
    #: tries after the first for retriable shard errors
    retries: int = field(default=2, metadata=_range(0, 100))
    #: consecutive failures that mark a shard unhealthy
    unhealthy_after_failures: int = field(default=3, metadata=_range(1, 1000))
    #: how often unhealthy shards are probed (and the shard map file is checked)
    probe_interval_seconds: float = field(default=2.0, metadata=_range(0.05, 3600))
    #: a (queue, shard, priority) a dequeue found empty is skipped by later dequeues until a
    #: change to it is seen (enqueue, failure ack, retry, the long-poll checks) or this long
    #: passed; 0 = always ask every partition
    empty_partition_ttl_seconds: float = field(default=2.0, metadata=_range(0, 60))
    #: a shard map that was not applied (refused or failed) is retried this often
    shard_map_retry_seconds: float = field(default=10.0, metadata=_range(0.05, 3600))
    #: how often the shards outside each partitioned queue's placement are checked for jobs
    placement_check_seconds: float = field(default=10.0, metadata=_range(0.05, 86_400))
    #: how often the unfinished jobs of dequeue_only (draining) shards are counted
    drain_count_interval_seconds: float = field(default=10.0, metadata=_range(0.05, 86_400))


@dataclass(frozen=True)
class BrokerConfig:
    """The prefetching dequeue broker (pinlater/storage/broker/, pinlater/ops/partition_owner.py):
    a server that owns a (queue, shard) partition through a lease keeps up to the queue's
    `prefetch` jobs of it reserved in memory and serves dequeues from them."""

    #: `prefetch` of a queue that has no setting of its own (0 = the broker is off for it)
    default_prefetch: int = field(default=0, metadata=_range(0, 10_000))
    #: a reserved job not handed out by then is given back by the janitor without an attempt
    #: used (the crash case); buffered jobs are released well before (idle_seconds)
    hold_seconds: float = field(default=30.0, metadata=_range(1, 3600))
    #: a buffered job idle this long is released (back to PENDING at once); below hold_seconds
    idle_seconds: float = field(default=10.0, metadata=_range(0.05, 3600))
    #: a partition lease lasts this long unless renewed (a dead server's partitions move then)
    lease_seconds: float = field(default=6.0, metadata=_range(0.5, 3600))
    #: how often leases are renewed and ownership recomputed (well under lease_seconds)
    renew_seconds: float = field(default=2.0, metadata=_range(0.05, 3600))
    #: hand-outs are written behind in batches at most this long after the dequeue
    write_behind_ms: int = field(default=5, metadata=_range(1, 1000))
    #: a buffer is refilled once it holds fewer than this share of `prefetch`
    low_water: float = field(default=0.5, metadata=_range(0, 1))
    #: dequeues asking for more jobs than this are throughput batches: their storage round
    #: trip is spread over many jobs, and buffering for them would only add a write per job
    #: (the hand-out), so they neither make the broker buffer a queue nor wait for it: they
    #: take what is buffered first, then storage, their acks riding with it as without it
    max_limit: int = field(default=32, metadata=_range(1, 100_000))


@dataclass(frozen=True)
class JanitorConfig:
    enabled: bool = True
    interval_seconds: float = field(default=10.0, metadata=_range(0.01, 86_400))
    claim_timeout_seconds: float = field(default=600.0, metadata=_range(0.001, 30 * 86_400))
    succeeded_ttl_seconds: float = field(default=86_400.0, metadata=_range(0, 10 * 365 * 86_400))
    failed_ttl_seconds: float = field(default=7 * 86_400.0, metadata=_range(0, 10 * 365 * 86_400))
    batch_size: int = field(default=1000, metadata=_range(1, 1_000_000))
    #: queues one janitor tick cleans; ticks are spread so that each queue is visited once per
    #: interval (a tick reads them with one call per shard, then writes only where work is due)
    queues_per_tick: int = field(default=100, metadata=_range(1, 1000))


@dataclass(frozen=True)
class BackendConfig:
    kind: str = "sqlite"
    shards: tuple[ShardSpec, ...] = ()
    #: backend-specific options (validated by the backend class)
    options: Mapping[str, Any] = field(default_factory=dict)
    #: optional YAML file with a `shards:` list, watched and hot-reloaded where supported
    shard_map_file: str | None = None
    #: refuse to start when any shard reports durability warnings (it could lose accepted jobs)
    require_durable: bool = False
    #: shards marked `retired_with_jobs: true`: never opened; their descriptors answer an error
    retired_shards: frozenset[str] = frozenset()


@dataclass(frozen=True)
class AdminConfig:
    #: `pbkdf2_sha256$ITERATIONS$SALT_HEX$HASH_HEX` (see `pinlater hash-password`); unset
    #: means deleteQueue is refused and the admin API (/api/v1 on the metrics port) is off
    password_hash: str | None = None
    #: wrong passwords one client address may try per minute (then refused before hashing)
    password_failures_per_minute: float = field(default=10, metadata=_range(0.01, 100_000))
    #: wrong passwords a client may try at once before that rate applies
    password_failure_burst: int = field(default=5, metadata=_range(1, 10_000))
    #: password hashes this server computes per second at most (each costs ~0.1 s of CPU)
    password_checks_per_second: float = field(default=4, metadata=_range(0.01, 10_000))
    #: a refused deleteQueue password is answered this much later (no thread waits), so a
    #: guessing connection makes at most one guess per delay; 0 answers at once
    password_refusal_delay_seconds: float = field(default=1.0, metadata=_range(0, 60))
    #: an admin API session (cookie from POST /api/v1/login) ends after this long unused
    session_idle_seconds: float = field(default=3600.0, metadata=_range(10, 7 * 86_400))
    #: ... and this long after the login whatever its use
    session_max_seconds: float = field(default=12 * 3600.0, metadata=_range(10, 30 * 86_400))
    #: admin API sessions held at once; a login beyond it ends the oldest session
    max_sessions: int = field(default=100, metadata=_range(1, 100_000))
    #: how often every server reads the queue settings stored in the backend (pause, rate
    #: limit, claim timeout set through the admin API): a cheap version read when unchanged
    settings_poll_seconds: float = field(default=1.0, metadata=_range(0.05, 5))


@dataclass(frozen=True)
class DashboardConfig:
    """The admin API (and the dashboard over it) on the HTTP listener (metrics.host/port)."""

    #: the API answers reads only: every action is refused with 403 read_only
    read_only: bool = False
    #: how often the per-queue enqueue/dequeue/ack counters are sampled for the API's rates
    rate_sample_seconds: float = field(default=5.0, metadata=_range(0.05, 300))
    #: samples kept per queue (rates and charts cover rate_sample_seconds x this)
    rate_samples: int = field(default=60, metadata=_range(12, 10_000))
    #: how often the jobs held by each shard are counted (GET /api/v1/shards)
    shard_counts_interval_seconds: float = field(default=60.0, metadata=_range(0.05, 86_400))
    #: jobs a jobs page may list at most (GET /api/v1/queues/Q/jobs?limit=)
    max_page_size: int = field(default=500, metadata=_range(1, 10_000))
    #: bytes of a job body shown in a preview (escaped)
    body_preview_bytes: int = field(default=256, metadata=_range(16, 65_536))


@dataclass(frozen=True)
class MetricsConfig:
    host: str = "127.0.0.1"
    #: 0 disables the metrics endpoint (and the queue depth collector)
    port: int = field(default=9999, metadata=_range(0, 65535))
    #: how often the queue depth gauges are refreshed from the store (never on a request)
    depth_interval_seconds: float = field(default=15.0, metadata=_range(0.05, 86_400))
    #: each depth gauge counts at most this many jobs (keeps a refresh cheap on big queues)
    depth_count_cap: int = field(default=100_000, metadata=_range(1, 2**31 - 1))
    #: how often the ledger audit runs (pinlater_ledger_imbalance_jobs), and how many
    #: (queue, shard) books one pass reads at most: an audit of a queue's books on SQL
    #: storage counts its jobs, so the work per pass is bounded and the queues take turns
    ledger_audit_interval_seconds: float = field(default=30.0, metadata=_range(0.05, 86_400))
    ledger_audits_per_pass: int = field(default=4, metadata=_range(1, 100_000))
    #: queues one depth tick reads (one call per shard); ticks are spread so that each queue
    #: is read once per depth_interval_seconds
    depth_queues_per_tick: int = field(default=200, metadata=_range(1, 1000))
    #: queues with series of their own in /metrics (0: every queue); the others are counted
    #: together under queue="(other)", so /metrics stays bounded however many queues exist
    max_queues: int = field(default=0, metadata=_range(0, 1_000_000))
    #: threads that serve the HTTP listener (/metrics, /health, /api/v1); a connection that
    #: finds them all busy and `http_max_waiting` connections waiting is closed at once
    http_threads: int = field(default=8, metadata=_range(1, 256))
    http_max_waiting: int = field(default=32, metadata=_range(0, 10_000))
    #: a request (TLS handshake, headers and body) must arrive, and its answer be sent, within
    #: this long; HTTP connections serve one request each
    http_request_timeout_seconds: float = field(default=10.0, metadata=_range(0.1, 600))
    #: connections one client address may hold at once
    http_connections_per_client: int = field(default=16, metadata=_range(1, 10_000))


@dataclass(frozen=True)
class AdmissionConfig:
    """Caps that make an overloaded server answer at once instead of queueing requests."""

    #: requests other than dequeueJobs in flight (read and not yet answered); more are refused
    #: at once with UNKNOWN "server busy"
    max_concurrent_requests: int = field(default=128, metadata=_range(1, 100_000))
    #: dequeueJobs calls running at once; more are refused with DEQUEUE_RATE_LIMITED. Must be
    #: below server.worker_threads, so other requests always find a worker; 0 = half of them
    max_concurrent_dequeues: int = field(default=0, metadata=_range(0, 100_000))
    #: dequeueJobs calls running at once on one queue; 0 = max_concurrent_dequeues
    max_concurrent_dequeues_per_queue: int = field(default=0, metadata=_range(0, 100_000))

    def dequeue_cap(self, worker_threads: int) -> int:
        return self.max_concurrent_dequeues or max(1, worker_threads // 2)

    def dequeue_cap_per_queue(self, worker_threads: int) -> int:
        return self.max_concurrent_dequeues_per_queue or self.dequeue_cap(worker_threads)


@dataclass(frozen=True)
class RequestLogConfig:
    #: warning lines (failed requests) per client address and minute; the rest are counted and
    #: reported in the next line that gets through
    max_warnings_per_peer_per_minute: int = field(default=60, metadata=_range(1, 1_000_000))


@dataclass(frozen=True)
class Config:
    server: ServerConfig = ServerConfig()
    backend: BackendConfig = BackendConfig()
    limits: LimitsConfig = LimitsConfig()
    priorities: PrioritiesConfig = PrioritiesConfig()
    sharding: ShardingConfig = ShardingConfig()
    janitor: JanitorConfig = JanitorConfig()
    broker: BrokerConfig = BrokerConfig()
    admin: AdminConfig = AdminConfig()
    dashboard: DashboardConfig = DashboardConfig()
    metrics: MetricsConfig = MetricsConfig()
    admission: AdmissionConfig = AdmissionConfig()
    request_log: RequestLogConfig = RequestLogConfig()
    #: named backends (`clusters:`, each shaped like `backend:`), one of which a queue's
    #: `cluster:` setting names (pinlater/storage/clusters.py); empty = the one `backend:`, and
    #: with clusters `backend` is the default cluster's section
    clusters: Mapping[str, BackendConfig] = field(default_factory=dict)
    #: the cluster of the queues whose settings name none (may be left out with one cluster)
    default_cluster: str | None = None
    #: per-queue settings file (rate limits, claim timeouts); None = no per-queue settings
    queue_config: str | None = None
    #: ServerSet file (`host:port` per line) listing the live servers; each server enforces
    #: its share (rate / number of servers) of the queue rate limits. None = limits per server
    server_set_file: str | None = None
    log_level: str = "INFO"
    #: `text` or `json` (one JSON object per line, for log shippers)
    log_format: str = "text"

    def storage_limits(self) -> StorageLimits:
        return StorageLimits(
            num_priorities=self.priorities.levels,
            body_cap=self.limits.body_max_bytes,
            status_cap=self.limits.custom_status_max_chars,
        )


#: environment variable -> (section, key); applied over the file, under command-line flags
ENV_OVERRIDES: dict[str, tuple[str | None, str]] = {
    "PINLATER_HOST": ("server", "host"),
    "PINLATER_PORT": ("server", "port"),
    "PINLATER_MAX_CONNECTIONS": ("server", "max_connections"),
    "PINLATER_WORKER_THREADS": ("server", "worker_threads"),
    "PINLATER_ROLE": ("server", "role"),
    "PINLATER_BACKEND": ("backend", "kind"),
    "PINLATER_DATA_DIR": ("backend", "data_dir"),
    "PINLATER_SHARD_MAP_FILE": ("backend", "shard_map_file"),
    "PINLATER_METRICS_PORT": ("metrics", "port"),
    "PINLATER_ADMIN_PASSWORD_HASH": ("admin", "password_hash"),
    "PINLATER_QUEUE_CONFIG": (None, "queue_config"),
    "PINLATER_SERVER_SET_FILE": (None, "server_set_file"),
    "PINLATER_METRICS_HOST": ("metrics", "host"),
    "PINLATER_LOG_LEVEL": (None, "log_level"),
    "PINLATER_LOG_FORMAT": (None, "log_format"),
    "PINLATER_CLAIM_TIMEOUT_SECONDS": ("janitor", "claim_timeout_seconds"),
}

_SECTIONS = typing.get_type_hints(Config)


def load_config(
    path: str | os.PathLike | None = None,
    *,
    resolve_backend: BackendResolver,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Mapping[str, Any] | Any] | None = None,
    checks: tuple[ConfigCheck, ...] = (),
) -> Config:
    """Build the validated Config from an optional YAML file, the environment and overrides.

    `overrides` has the file's shape (e.g. {"server": {"port": 9011}}); used for CLI flags.
    `resolve_backend(kind)` gives the Backend class that validates the `backend:` section (this
    module imports no backend); each of `checks` adds the problems it finds in the built config.
    Raises ConfigError listing every problem. Servers and tests call `pinlater.app.load_config`,
    which supplies the registry and the operating checks.
    """
    raw: dict[str, Any] = {}
    problems: list[str] = []
    if path is not None:
        raw = read_yaml(Path(path), problems)
    _apply_env(raw, os.environ if env is None else env, problems)
    for section, values in (overrides or {}).items():
        if isinstance(values, Mapping):
            current = raw.get(section)
            raw[section] = {**(current if isinstance(current, dict) else {}), **values}
        else:
            raw[section] = values
    config = _build_config(raw, problems, resolve_backend)
    for check in checks:
        problems.extend(check(config))
    if problems:
        raise ConfigError(problems)
    return config


def read_yaml(path: Path, problems: list[str]) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        problems.append(f"{path}: cannot read: {exc.strerror or exc}")
        return {}
    except yaml.YAMLError as exc:
        problems.append(f"{path}: not valid YAML: {exc}")
        return {}
    if data is None:
        return {}
    if not isinstance(data, dict):
        problems.append(f"{path}: the top level must be a mapping")
        return {}
    return data


def _apply_env(raw: dict[str, Any], env: Mapping[str, str], problems: list[str]) -> None:
    for var, (section, key) in ENV_OVERRIDES.items():
        if var not in env:
            continue
        if section is None:
            raw[key] = env[var]
            continue
        target = raw.setdefault(section, {})
        if not isinstance(target, dict):
            problems.append(f"{section}: must be a mapping (needed for {var})")
            continue
        target[key] = env[var]


def _build_config(
    raw: dict[str, Any], problems: list[str], resolve_backend: BackendResolver
) -> Config:
    kwargs: dict[str, Any] = {}
    for key in raw:
        if key not in _SECTIONS:
            problems.append(f"{key}: unknown key (expected one of {', '.join(_SECTIONS)})")
    for name, cls in _SECTIONS.items():
        if name == "backend":  # always built: the backend supplies default shards
            kwargs[name] = _build_backend(raw.get(name, {}), problems, resolve_backend)
        elif name == "clusters" and name in raw:
            kwargs[name] = _build_clusters(raw[name], problems, resolve_backend)
        elif name not in raw:
            continue
        elif isinstance(cls, type) and dataclasses.is_dataclass(cls):
            kwargs[name] = build_section(cls, raw[name], name, problems)
        else:
            kwargs[name] = coerce(raw[name], hint(Config, name), name, problems, None)
    _place_clusters(kwargs, raw, problems)
    config = Config(**kwargs)
    if config.admin.password_hash:
        try:
            parse_password_hash(config.admin.password_hash)
        except ValueError as exc:
            problems.append(f"admin.password_hash: {exc} (make one with `pinlater hash-password`)")
    _check_operating(config, problems)
    _check_broker(config.broker, problems)
    _check_reply_room(config, problems)
    _check_tls(config.server.tls, problems)
    if config.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        problems.append(f"log_level: {config.log_level!r} is not a log level")
    if config.log_format not in LOG_FORMATS:
        problems.append(
            f"log_format: {config.log_format!r} must be one of {', '.join(LOG_FORMATS)}"
        )
    if config.server.role not in ROLES:
        problems.append(f"server.role: {config.server.role!r} must be one of {', '.join(ROLES)}")
    return config


def _check_broker(broker: BrokerConfig, problems: list[str]) -> None:
    """A buffered job must be released well before its hold ends (the janitor would give it
    back while this server could still hand it out), and leases renewed before they end."""
    if broker.idle_seconds * 2 > broker.hold_seconds:
        problems.append(
            f"broker.idle_seconds: {broker.idle_seconds} must be at most half of "
            f"broker.hold_seconds ({broker.hold_seconds})"
        )
    if broker.renew_seconds * 2 > broker.lease_seconds:
        problems.append(
            f"broker.renew_seconds: {broker.renew_seconds} must be at most half of "
            f"broker.lease_seconds ({broker.lease_seconds})"
        )


def _check_operating(config: Config, problems: list[str]) -> None:
    """Cross-key checks of the operating settings."""
    admission, workers = config.admission, config.server.worker_threads
    if (
        admission.max_concurrent_dequeues
        and workers > 1
        and (admission.max_concurrent_dequeues >= workers)
    ):
        problems.append(
            f"admission.max_concurrent_dequeues: {admission.max_concurrent_dequeues} "
            f"must be below server.worker_threads ({workers}) so dequeues cannot "
            "take every worker"
        )


def _check_reply_room(config: Config, problems: list[str]) -> None:
    """One job at the body and status caps must fit one reply frame (else no dequeue or lookup
    could ever hand it out)."""
    limits, frame = config.limits, config.server.max_frame_bytes
    needed = largest_single_job_reply(
        limits.body_max_bytes,
        limits.custom_status_max_chars,
        limits.max_queue_name_length,
        config.priorities.levels,
        CLAIM_SOURCE_OFFSET + limits.max_source_length,
    )
    if needed > frame:
        problems.append(
            f"server.max_frame_bytes: {frame} cannot hold the reply for one job at "
            f"limits.body_max_bytes ({limits.body_max_bytes}) with a status at "
            f"limits.custom_status_max_chars ({limits.custom_status_max_chars}): it needs "
            f"{needed} bytes; raise max_frame_bytes or lower those limits"
        )


def _check_tls(tls: TlsConfig, problems: list[str]) -> None:
    """With TLS on, the certificate and key must load (reported before the port is bound)."""
    if not tls.enabled:
        return
    if not tls.cert_file:
        problems.append("server.tls.cert_file: required when server.tls.enabled is true")
        return
    try:
        server_context(tls.cert_file, tls.key_file, None)
    except (OSError, ssl.SSLError) as exc:
        problems.append(
            f"server.tls.cert_file: cannot load {tls.cert_file}"
            f"{' / ' + tls.key_file if tls.key_file else ''}: {exc}"
        )
    if tls.client_ca_file:
        try:
            ssl.create_default_context(cafile=tls.client_ca_file)
        except (OSError, ssl.SSLError) as exc:
            problems.append(f"server.tls.client_ca_file: cannot load {tls.client_ca_file}: {exc}")


def _build_backend(
    raw: Any, problems: list[str], resolve_backend: BackendResolver, path: str = "backend"
) -> BackendConfig:
    """The backend section, validated by the Backend class of its kind (the storage contract's
    `parse_options` / `parse_shards`)."""
    if not isinstance(raw, dict):
        problems.append(f"{path}: must be a mapping")
        return BackendConfig()
    raw = dict(raw)
    kind = str(raw.pop("kind", "sqlite"))
    shard_map_file = raw.pop("shard_map_file", None)
    shards_raw = raw.pop("shards", None)
    require_durable = coerce(
        raw.pop("require_durable", False), bool, f"{path}.require_durable", problems, None
    )
    require_durable = require_durable is True
    try:
        cls = resolve_backend(kind)
    except KeyError as exc:
        problems.append(f"{path}.kind: {exc.args[0]}")
        return BackendConfig()
    try:
        options = cls.parse_options(raw, path)
        if shard_map_file is not None:
            shards_raw = read_shard_map(str(shard_map_file))
        shard_map = parse_shard_map(cls, shards_raw, options, f"{path}.shards")
    except ConfigError as exc:
        problems.extend(exc.problems)
        return BackendConfig(kind=kind)
    return BackendConfig(
        kind=kind,
        shards=shard_map.specs,
        retired_shards=shard_map.retired,
        options=options,
        shard_map_file=None if shard_map_file is None else str(shard_map_file),
        require_durable=require_durable,
    )


def _build_clusters(
    raw: Any, problems: list[str], resolve_backend: BackendResolver
) -> dict[str, BackendConfig]:
    """`clusters:` name -> a `backend:`-shaped section each. Shard names must be unique across
    clusters: a job descriptor names its shard, and so its cluster."""
    if not isinstance(raw, dict) or not raw:
        problems.append("clusters: must be a non-empty mapping of name -> backend section")
        return {}
    clusters: dict[str, BackendConfig] = {}
    owner: dict[str, str] = {}
    for name, section in raw.items():
        if not isinstance(name, str) or not _CLUSTER_NAME.fullmatch(name):
            problems.append(f"clusters: {name!r} is not a cluster name ([A-Za-z0-9_]{{1,32}})")
            continue
        built = _build_backend(section, problems, resolve_backend, f"clusters.{name}")
        for shard in [s.name for s in built.shards] + sorted(built.retired_shards):
            if shard in owner:
                problems.append(
                    f"clusters.{name}.shards: shard name {shard!r} is also in cluster "
                    f"{owner[shard]!r} (shard names must be unique across clusters)"
                )
            owner.setdefault(shard, name)
        clusters[name] = built
    return clusters


def _place_clusters(kwargs: dict[str, Any], raw: dict[str, Any], problems: list[str]) -> None:
    """With `clusters:`, `backend` becomes the default cluster's section."""
    if kwargs.get("clusters"):
        # `data_dir` alone (PINLATER_DATA_DIR, --data-dir: set without knowing the config) is
        # not a `backend:` of its own; a cluster sets its own
        own = set(raw.get("backend") or ()) - {"data_dir"}
        kwargs["backend"] = _default_cluster(kwargs, bool(own), problems)
    elif "default_cluster" in kwargs:
        problems.append("default_cluster: only with `clusters:`")


def _default_cluster(kwargs: dict[str, Any], has_backend: bool, problems: list[str]) -> Any:
    """The default cluster's section (which `Config.backend` holds with clusters)."""
    clusters = kwargs["clusters"]
    if has_backend:
        problems.append("backend: give either `backend:` or `clusters:`, not both")
    default = kwargs.get("default_cluster")
    if default is None and len(clusters) == 1:
        default = kwargs["default_cluster"] = next(iter(clusters))
    if default not in clusters:
        problems.append(
            f"default_cluster: {default!r} must name one of the clusters ({', '.join(clusters)})"
        )
        return next(iter(clusters.values()))
    return clusters[default]


def read_shard_map(path: str) -> Any:
    """The `shards:` list of a shard map file (raises ConfigError naming the file)."""
    problems: list[str] = []
    data = read_yaml(Path(path), problems)
    if problems:
        raise ConfigError(problems)
    if "shards" not in data:
        raise ConfigError([f"{path}: missing key 'shards'"])
    return data["shards"]
