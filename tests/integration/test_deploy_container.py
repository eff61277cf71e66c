"""The Dockerfile and compose.yaml, checked as far as a machine without a Docker engine allows:
hadolint on the Dockerfile, the image's build context makes a complete wheel, the compose file
validates against the Compose specification, and every service command and environment name is
one the server, the worker and the CLI accept (parsed with their real parsers and config
loader, reading the config files the services mount)."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from tests.integration.deploy_checks import (
    assert_known_env,
    cli_args,
    run_tool,
    server_config,
    venv_tool,
    worker_args,
)
from tests.support import unavailable
from tests.support.server_process import REPO_ROOT

DOCKERFILE = REPO_ROOT / "Dockerfile"
COMPOSE = REPO_ROOT / "compose.yaml"
PROMETHEUS_CONFIG = REPO_ROOT / "deploy" / "prometheus" / "prometheus.yml"
INTERPOLATION = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")


def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    found = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def image_env() -> dict[str, str]:
    env = {}
    for word, rest in dockerfile_instructions():
        if word == "ENV":
            for item in shlex.split(rest):
                key, _, value = item.partition("=")
                env[key] = value
    return env


def image_entrypoint() -> list[str]:
    entry = [
        yaml.safe_load(rest) for word, rest in dockerfile_instructions() if word == "ENTRYPOINT"
    ]
    return entry[-1]


# ---- Dockerfile ----


def test_hadolint_finds_nothing_in_the_dockerfile():
    done = run_tool([venv_tool("hadolint"), "--no-color", str(DOCKERFILE)])
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == ""


def test_the_image_runs_as_a_numeric_non_root_user_with_a_health_check():
    instructions = dockerfile_instructions()
    users = [rest for word, rest in instructions if word == "USER"]
    assert users and users[-1].split(":")[0].isdigit() and users[-1].split(":")[0] != "0"
    health = [rest for word, rest in instructions if word == "HEALTHCHECK"]
    assert len(health) == 1 and "/health" in health[0]
    assert "PINLATER_METRICS_PORT" in health[0]
    assert_known_env(image_env(), "Dockerfile ENV")
    assert image_entrypoint() == ["pinlater-server"]
    config = server_config([], image_env(), "Dockerfile")
    assert (config.server.host, config.metrics.host) == ("0.0.0.0", "0.0.0.0")


def _build_context(tmp: Path) -> Path:
    """The files the build stage COPYs (symlinks kept, as Docker does), each allowed by
    .dockerignore's `!name` lines."""
    allowed = {
        line[1:].rstrip("/")
        for line in (REPO_ROOT / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    context = tmp / "context"
    context.mkdir()
    for word, rest in dockerfile_instructions():
        if word != "COPY" or rest.startswith("--from"):
            continue
        *sources, _dest = shlex.split(rest)
        for source in sources:
            assert source in allowed, f".dockerignore leaves {source} out of the build context"
            path = REPO_ROOT / source
            if path.is_dir():
                shutil.copytree(
                    path,
                    context / source,
                    symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
                )
            else:
                shutil.copy2(path, context / source, follow_symlinks=False)
    return context


@pytest.mark.slow
def test_the_image_build_context_makes_a_complete_wheel(tmp_path):
    context = _build_context(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path / "w"), "."],
        cwd=context,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    # the build itself warns about nothing (package data, license, editable layout ...)
    build_output = done.stdout + done.stderr
    assert "Warning" not in build_output and "is absent" not in build_output, build_output
    (wheel,) = (tmp_path / "w").glob("pinlater-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        shipped = set(archive.namelist())
    for package in ("pinlater", "backends", "worker_sdk"):
        for path in (REPO_ROOT / package).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                name = path.relative_to(REPO_ROOT).as_posix()
                assert name in shipped, f"the image would lack {name}"
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]); import pinlater.idl, pinlater.main; "
        "assert pinlater.__file__.startswith(sys.argv[1]), pinlater.__file__"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(site)], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr


# ---- compose.yaml ----


def test_compose_file_matches_the_compose_specification():
    done = run_tool(
        [venv_tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(COMPOSE)]
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _interpolate(value: str, variables: dict[str, str]) -> str:
    return INTERPOLATION.sub(lambda m: variables.get(m.group(1), m.group(2) or ""), value)


def _mounted(service: dict, path: str) -> str:
    """The repository path of a container path under one of the service's bind mounts."""
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith(".") and (path == target or path.startswith(target + "/")):
            return str(REPO_ROOT / source / path[len(target) :].lstrip("/"))
    return path


def _service_argv(name: str, service: dict, variables: dict[str, str]) -> tuple[str, list[str]]:
    """(program, arguments) of a service running the image, bind-mounted paths mapped."""
    entry = service.get("entrypoint", image_entrypoint())
    command = [_mounted(service, _interpolate(str(a), variables)) for a in service["command"]]
    assert isinstance(entry, list) and len(entry) == 1, f"{name}: entrypoint {entry}"
    return entry[0], command


def _pinlater_services(spec: dict) -> dict[str, dict]:
    return {
        name: service
        for name, service in spec["services"].items()
        if service.get("build") or service.get("image") == spec["services"]["server"]["image"]
    }


def _parse_service(name: str, service: dict, variables: dict[str, str]):
    """(program, what its real parser or config loader made of the service's command)."""
    program, argv = _service_argv(name, service, variables)
    what = f"compose service {name}"
    env = {**image_env(), **service.get("environment", {})}
    if program == "pinlater-server":
        return program, server_config(argv, env, what)
    assert_known_env(service.get("environment", {}), what, client=True)
    if program == "pinlater-worker":
        return program, worker_args(argv, what)
    assert program == "pinlater", f"{name}: unknown program {program}"
    return program, cli_args(argv, what)


@pytest.mark.parametrize("backend", ["mysql", "redis"])
def test_every_compose_service_command_and_env_is_accepted(backend):
    spec = compose()
    variables = {"PINLATER_COMPOSE_BACKEND": backend}
    services = _pinlater_services(spec)
    assert set(services) == {"server", "create-queues", "worker"}
    parsed = dict(_parse_service(name, service, variables) for name, service in services.items())
    assert set(parsed) == {"pinlater-server", "pinlater-worker", "pinlater"}
    config, worker, created = (
        parsed[p] for p in ("pinlater-server", "pinlater-worker", "pinlater")
    )
    assert config.backend.kind == backend
    assert config.backend.require_durable
    assert all(getattr(s, "host", None) in spec["services"] for s in config.backend.shards)
    assert worker.servers == f"server:{config.server.port}"
    assert (created.host, created.port) == ("server", config.server.port)
    assert created.queue == worker.queue, "the worker's queue must be the one create-queues makes"
    ports = {int(p.split(":")[1]) for p in spec["services"]["server"]["ports"]}
    assert ports == {config.server.port, config.metrics.port}


def test_compose_wires_prometheus_and_grafana_to_the_server():
    spec = compose()
    config = server_config(
        ["--config", str(REPO_ROOT / "deploy" / "compose" / "mysql.yaml")], image_env(), "compose"
    )
    scrape = yaml.safe_load(PROMETHEUS_CONFIG.read_text())["scrape_configs"]
    targets = [t for job in scrape for c in job["static_configs"] for t in c["targets"]]
    assert targets == [f"server:{config.metrics.port}"]
    grafana = spec["services"]["grafana"]
    mounts = dict(v.split(":")[:2] for v in grafana["volumes"])
    assert mounts["./deploy/grafana/pinlater.json"].startswith("/var/lib/grafana/dashboards/")
    datasources = yaml.safe_load(
        (REPO_ROOT / "deploy/grafana/provisioning/datasources/prometheus.yaml").read_text()
    )
    assert datasources["datasources"][0]["url"] == "http://prometheus:9090"
    for service, needed in (("prometheus", PROMETHEUS_CONFIG), ("grafana", None)):
        for volume in spec["services"][service]["volumes"]:
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (REPO_ROOT / source).exists(), f"{service} mounts missing {source}"
        assert needed is None or needed.exists()


def test_promtool_accepts_the_prometheus_config():
    promtool = shutil.which("promtool")
    if promtool is None:
        unavailable("promtool is not installed (scripts/test installs Debian's `prometheus`)")
    done = run_tool([promtool, "check", "config", str(PROMETHEUS_CONFIG)])
    assert done.returncode == 0, done.stdout + done.stderr
