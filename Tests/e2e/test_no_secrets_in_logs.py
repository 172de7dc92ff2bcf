"""Runs last (see conftest): no token, refresh token, password or client secret the suite handled
appears in any daemon log written during the run, in this process or in those that ran before it
(`make e2e`: their records in $MSSO_E2E_RECORDS)."""
import json
import os
from pathlib import Path

import pytest

from harness import LOGS, SECRETS


def recorded():
    """The daemon logs and the secrets of this process and of the processes that recorded theirs."""
    logs, secrets = list(LOGS), set(SECRETS)
    if os.environ.get("MSSO_E2E_RECORDS"):
        for path in sorted(Path(os.environ["MSSO_E2E_RECORDS"]).glob("*.json")):
            record = json.loads(path.read_text())
            logs += [Path(log) for log in record["logs"]]
            secrets.update(record["secrets"])
    return logs, secrets


def test_no_secret_in_any_daemon_log():
    every_log, secrets = recorded()
    logs = [log for log in every_log if log.exists()]
    if not logs:
        pytest.skip("run with the rest of the suite: no daemon ran before this test")
    tokens = [secret for secret in secrets if len(secret) >= 40]
    assert tokens, "the suite recorded no token to look for"
    text = "\n".join(log.read_text(errors="replace") for log in logs)
    assert "listening" in text and "method=sign" in text, "the logs are the daemons' debug logs"
    leaked = [f"{secret[:6]}… ({len(secret)} chars)" for secret in secrets if len(secret) >= 8 and secret in text]
    assert not leaked, f"secrets found in daemon logs: {leaked}"
