"""The Kubernetes manifests (deploy/k8s/): schema-valid offline (kubernetes-validate --strict,
which bundles the API schemas), and consistent with the server they run: the server's flags,
environment and mounted config are accepted by the real parsers and config loader, the probes
and Service point at the ports that config opens, the probe paths answer 200 on a real server,
and there is one worker Deployment per configured queue, each pointed at the Service."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import yaml

from tests.integration.deploy_checks import (
    assert_known_env,
    run_tool,
    server_config,
    venv_tool,
    worker_args,
)
from tests.support.server_process import REPO_ROOT, ServerProcess, free_port

K8S = REPO_ROOT / "deploy" / "k8s"
CONFIG_MOUNT = "/etc/pinlater"


def manifests() -> list[dict]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name != "kustomization.yaml":
            docs += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return docs


def find(kind: str, name: str | None = None) -> list[dict]:
    return [
        doc
        for doc in manifests()
        if doc["kind"] == kind and (name is None or doc["metadata"]["name"] == name)
    ]


def server_deployment() -> dict:
    (deployment,) = find("Deployment", "pinlater-server")
    return deployment


def container(deployment: dict) -> dict:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return only


def test_kubernetes_validate_accepts_every_manifest_strictly():
    files = sorted(str(p) for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")
    done = run_tool([venv_tool("kubernetes-validate"), "--strict", "--quiet", *files])
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_kustomization_lists_every_manifest():
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    files = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files
    images = {image["name"] for image in kustomization["images"]}
    used = {container(d)["image"] for d in find("Deployment")}
    assert used == images


def _mounted_config(tmp: Path) -> Path:
    """The ConfigMap's files as the server pod sees them (the mount path mapped to `tmp`)."""
    (config_map,) = find("ConfigMap", "pinlater-config")
    mounts = {m["name"]: m["mountPath"] for m in container(server_deployment())["volumeMounts"]}
    assert mounts["config"] == CONFIG_MOUNT
    for name, text in config_map["data"].items():
        (tmp / name).write_text(text.replace(CONFIG_MOUNT + "/", f"{tmp}/"))
    return tmp


def _server_config(tmp: Path):
    server = container(server_deployment())
    env = {item["name"]: item["value"] for item in server["env"]}
    argv = [arg.replace(CONFIG_MOUNT, str(_mounted_config(tmp))) for arg in server["args"]]
    return server_config(argv, env, "server Deployment")


def test_the_server_deployment_runs_with_flags_env_and_config_the_server_accepts(tmp_path):
    config = _server_config(tmp_path)
    assert (config.server.host, config.metrics.host) == ("0.0.0.0", "0.0.0.0")
    ports = {p["name"]: p["containerPort"] for p in container(server_deployment())["ports"]}
    assert ports == {"thrift": config.server.port, "metrics": config.metrics.port}
    spec = server_deployment()["spec"]["template"]["spec"]
    pre_stop = container(server_deployment())["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    assert (
        spec["terminationGracePeriodSeconds"]
        > float(pre_stop[1]) + config.server.shutdown_grace_seconds
    )
    assert spec["securityContext"]["runAsNonRoot"] is True


def test_probes_and_the_service_point_at_the_ports_the_server_opens(tmp_path):
    config = _server_config(tmp_path)
    server = container(server_deployment())
    readiness, liveness = server["readinessProbe"]["httpGet"], server["livenessProbe"]["httpGet"]
    assert readiness["path"] == "/health"
    assert readiness["port"] == liveness["port"] == "metrics"
    (service,) = find("Service", "pinlater")
    labels = server_deployment()["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    names = {p["name"] for p in server["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} == names
    assert {p["port"] for p in service["spec"]["ports"]} == {
        config.server.port,
        config.metrics.port,
    }
    (budget,) = find("PodDisruptionBudget")
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert budget["spec"]["minAvailable"] < server_deployment()["spec"]["replicas"]


def test_the_probe_paths_answer_200_on_a_real_server(tmp_path):
    server = container(server_deployment())
    paths = {server[p]["httpGet"]["path"] for p in ("readinessProbe", "livenessProbe")}
    port = free_port()
    config = {"janitor": {"enabled": False}, "metrics": {"port": port}}
    with ServerProcess(config, tmp_path):
        for path in sorted(paths):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
                assert answer.status == 200, path


def _queue_config(tmp: Path) -> dict:
    config = _server_config(tmp)
    return yaml.safe_load(Path(config.queue_config).read_text())["queues"]


def test_one_worker_deployment_per_configured_queue_each_on_the_service(tmp_path):
    queues = _queue_config(tmp_path)
    (service,) = find("Service", "pinlater")
    thrift = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "thrift")
    workers = [d for d in find("Deployment") if d["metadata"]["name"] != "pinlater-server"]
    seen = []
    for deployment in workers:
        worker = container(deployment)
        args = worker_args(worker["args"], deployment["metadata"]["name"])
        env = {item["name"]: item.get("value") for item in worker.get("env", [])}
        assert_known_env(env, deployment["metadata"]["name"], client=True)
        assert args.wait_for_queue, "a worker started before its queue exists must wait"
        assert worker["command"] == ["pinlater-worker"]
        assert args.servers == f"{service['metadata']['name']}:{thrift}"
        assert deployment["metadata"]["labels"]["pinlater.queue"] == args.queue
        assert deployment["spec"]["selector"]["matchLabels"]["pinlater.queue"] == args.queue
        grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        assert grace > args.shutdown_timeout
        seen.append(args.queue)
    assert sorted(seen) == sorted(queues), "one worker Deployment per queue, no more"


def test_every_container_drops_privileges():
    for deployment in find("Deployment"):
        security = container(deployment)["securityContext"]
        assert security["allowPrivilegeEscalation"] is False
        assert security["readOnlyRootFilesystem"] is True
        assert security["capabilities"]["drop"] == ["ALL"]
