"""How pinlater-server's flags combine with the environment and the config file."""

from __future__ import annotations

import yaml

from pinlater.app import load_config
from pinlater.main import flag_overrides, parse_args


def test_flags_override_environment_which_overrides_the_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        yaml.safe_dump({"server": {"port": 1111, "host": "127.0.0.1", "max_connections": 7}})
    )
    env = {"PINLATER_PORT": "2222", "PINLATER_DATA_DIR": str(tmp_path / "env-data")}
    args = parse_args(
        [
            "--config",
            str(path),
            "--port",
            "3333",
            "--data-dir",
            str(tmp_path / "flag-data"),
            "--log-level",
            "debug",
        ]
    )
    config = load_config(args.config, env=env, overrides=flag_overrides(args))
    assert config.server.port == 3333
    assert config.server.max_connections == 7
    assert config.backend.options["data_dir"] == str(tmp_path / "flag-data")
    assert config.log_level.upper() == "DEBUG"
    only_env = load_config(str(path), env=env, overrides=flag_overrides(parse_args([])))
    assert only_env.server.port == 2222
    assert only_env.backend.options["data_dir"] == str(tmp_path / "env-data")


def test_no_flags_give_the_sqlite_default_with_one_shard_in_pinlater_data():
    config = load_config(None, env={}, overrides=flag_overrides(parse_args([])))
    assert config.backend.kind == "sqlite"
    assert [spec.name for spec in config.backend.shards] == ["1"]
    assert config.backend.options["data_dir"] == "./pinlater-data"
