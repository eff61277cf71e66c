"""The README's deploy and serve examples name files that exist and flags the programs accept:
every command of the Deploy section's code block, and every `./scripts/serve` example in the
README, is checked here (an unknown kind of command fails the test, so a new example needs a
check)."""

from __future__ import annotations

import itertools
import re
import shlex
import tomllib

import yaml

from tests.integration.deploy_checks import server_config
from tests.integration.test_deploy_container import dockerfile_instructions
from tests.support.server_process import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text()


def deploy_commands() -> list[list[str]]:
    section = README.split("\n## Deploy\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```sh\n(.*?)```", section, re.S)
    return [shlex.split(line, comments=True) for line in block.splitlines() if line.strip()]


def serve_examples() -> list[list[str]]:
    """`./scripts/serve ...` wherever the README shows one (code blocks and inline code)."""
    found = re.findall(r"(?:^|`)(\./scripts/serve\b[^`#\n]*)", README, re.M)
    return [shlex.split(example)[1:] for example in found]


def _extras() -> dict[str, list[str]]:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    return project["optional-dependencies"]


def test_every_serve_example_starts_with_the_drivers_serve_installs():
    serve = (REPO_ROOT / "scripts" / "serve").read_text()
    (extras,) = re.findall(r'_venv\.sh" "(\w*)"', serve)
    installed = set(_extras()[extras])
    examples = serve_examples()
    assert ["--config", "configs/redis.local.yaml"] in examples
    assert ["--port", "9011", "--metrics-port", "9998"] in examples
    for example in examples:
        if example == ["--help"]:
            continue  # argparse's own
        argv = [str(REPO_ROOT / a) if a.startswith("configs/") else a for a in example]
        config = server_config(argv, {}, f"README: ./scripts/serve {' '.join(example)}")
        drivers = set(_extras().get(config.backend.kind, []))
        assert drivers <= installed, f"serve does not install the {config.backend.kind} driver"
    for kind in ("mysql", "redis"):
        assert (REPO_ROOT / "configs" / f"{kind}.local.yaml").exists()
        assert set(_extras()[kind]) <= installed


def _check_docker_run(argv: list[str]) -> None:
    """Published ports are ones the image EXPOSEs, volumes ones it declares."""
    instructions = dockerfile_instructions()
    exposed = {int(p) for w, rest in instructions if w == "EXPOSE" for p in rest.split()}
    volumes = {v for w, rest in instructions if w == "VOLUME" for v in yaml.safe_load(rest)}
    options = dict(itertools.pairwise(argv))
    published = [v for f, v in itertools.pairwise(argv) if f == "-p"]
    assert published and all(int(v.split(":")[1]) in exposed for v in published), published
    assert options["-v"].split(":")[1] in volumes, options["-v"]


def _check_docker(argv: list[str]) -> None:
    if argv[1] == "build":
        assert argv[-1] == "." and (REPO_ROOT / "Dockerfile").exists()
    elif argv[1] == "run":
        _check_docker_run(argv)
    else:
        assert argv[1:3] == ["compose", "up"], argv
        assert (REPO_ROOT / "compose.yaml").exists()


def test_every_deploy_command_names_what_exists():
    compose = (REPO_ROOT / "compose.yaml").read_text()
    seen = set()
    for argv in deploy_commands():
        while "=" in argv[0]:  # VAR=value prefix: a variable compose.yaml interpolates
            name = argv.pop(0).split("=")[0]
            assert "${" + name + ":-" in compose, f"compose.yaml does not read {name}"
        program = argv[0]
        seen.add(program)
        if program == "docker":
            _check_docker(argv)
        elif program == "kubectl":
            assert argv[1:3] == ["apply", "-k"]
            assert (REPO_ROOT / argv[3] / "kustomization.yaml").exists()
        elif program == "cp":
            assert (REPO_ROOT / argv[1]).exists(), argv[1]
        else:
            raise AssertionError(f"README Deploy example not checked by this test: {argv}")
    assert seen == {"docker", "kubectl", "cp"}
