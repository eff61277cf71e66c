"""docs/admin-api.md's examples (one curl command per endpoint, and the CLI's pause/resume) run
as written, in order, in one bash session against a real server, and print what the page shows
(tests/support/readme_blocks.py compares; `...` stands for what varies)."""

from __future__ import annotations

import re
import shutil

import pytest

from pinlater.common.passwords import hash_password
from tests.integration.test_readme_tour import console_scripts, run_blocks, shell_env
from tests.support import readme_blocks
from tests.support.server_process import REPO_ROOT, ServerProcess, free_port

DOC = (REPO_ROOT / "docs" / "admin-api.md").read_text(encoding="utf-8")


@pytest.mark.skipif(not (shutil.which("curl") and shutil.which("jq")), reason="needs curl, jq")
def test_the_admin_api_examples_run_as_written(tmp_path):
    metrics_port = free_port()
    console_scripts(tmp_path)
    config = {
        "metrics": {"port": metrics_port},
        "admin": {"password_hash": hash_password("secret", iterations=1000)},
    }
    with ServerProcess(config, tmp_path) as server:
        run_blocks(
            ["admin-api"], tmp_path, shell_env(server, metrics_port), any_shard=False, text=DOC
        )


def test_every_endpoint_has_an_example():
    """Each path of the endpoint table appears in a curl command of a tested block."""
    commands = "\n".join(readme_blocks.blocks(DOC, "admin-api"))
    table = DOC[DOC.index("| method and path | what |") :].split("\n\n", 1)[0]
    paths = re.findall(r"`(?:GET |POST )?((?:/api/v1|\.\.\.)/[^`]*)`", table)
    assert len(paths) == 19, paths
    for path in paths:
        pattern = (
            re.escape(path)
            .replace(re.escape("/api/v1"), r"\$API")
            .replace(re.escape("..."), r"\$API/queues/Q")
            .replace("/Q", "/(emails|reports)")
            .replace("DESCRIPTOR", r"\S+")
        )
        assert re.search(pattern + r"(\s|$|\?|\")", commands), f"no example for {path}"
