"""configs/prometheus-ledger-alerts.yaml parses as Prometheus rules and fires as documented:
`promtool check rules`, then `promtool test rules` over series of the exported gauge."""

from __future__ import annotations

import shutil
import subprocess

import yaml

from tests.support import unavailable
from tests.support.server_process import REPO_ROOT

RULES = REPO_ROOT / "configs" / "prometheus-ledger-alerts.yaml"

#: a queue balanced on two servers, another that loses 2 jobs after 5 minutes and keeps them
#: lost (one server still reports 0: the alert takes the largest value)
UNIT_TEST = {
    "rule_files": [str(RULES)],
    "evaluation_interval": "1m",
    "tests": [
        {
            "interval": "1m",
            "input_series": [
                {
                    "series": 'pinlater_ledger_imbalance_jobs{queue="ok",instance="a"}',
                    "values": "0x20",
                },
                {
                    "series": 'pinlater_ledger_imbalance_jobs{queue="ok",instance="b"}',
                    "values": "0x20",
                },
                {
                    "series": 'pinlater_ledger_imbalance_jobs{queue="lossy",instance="a"}',
                    "values": "0 0 0 0 0 2x15",
                },
                {
                    "series": 'pinlater_ledger_imbalance_jobs{queue="lossy",instance="b"}',
                    "values": "0x20",
                },
            ],
            "alert_rule_test": [
                {"eval_time": "8m", "alertname": "PinLaterLedgerImbalance", "exp_alerts": []},
                {
                    "eval_time": "12m",
                    "alertname": "PinLaterLedgerImbalance",
                    "exp_alerts": [
                        {
                            "exp_labels": {"queue": "lossy", "severity": "critical"},
                            "exp_annotations": {
                                "summary": "PinLater queue lossy: the books do not balance",
                                "description": "2 job(s) of queue lossy are not accounted "
                                "for. Run `pinlater audit --queue lossy` to see the books "
                                "per shard.",
                            },
                        }
                    ],
                },
            ],
        }
    ],
}


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        unavailable("promtool is not installed (scripts/test installs Debian's `prometheus`)")
    return found


def test_promtool_accepts_the_ledger_alert_rules():
    done = subprocess.run(
        [promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 2 rules found" in done.stdout + done.stderr


def test_the_imbalance_alert_fires_for_the_lossy_queue_only(tmp_path):
    spec = tmp_path / "ledger_alerts_test.yaml"
    spec.write_text(yaml.safe_dump(UNIT_TEST, sort_keys=False))
    done = subprocess.run(
        [promtool(), "test", "rules", str(spec)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
