"""Runs last (see conftest): no token, refresh token, password or client secret the suite handled
appears in any daemon log written during the run."""
import pytest

from harness import LOGS, SECRETS


def test_no_secret_in_any_daemon_log():
    logs = [log for log in LOGS if log.exists()]
    if not logs:
        pytest.skip("run with the rest of the suite: no daemon ran before this test")
    tokens = [secret for secret in SECRETS if len(secret) >= 40]
    assert tokens, "the suite recorded no token to look for"
    text = "\n".join(log.read_text(errors="replace") for log in logs)
    assert "listening" in text and "method=sign" in text, "the logs are the daemons' debug logs"
    leaked = [f"{secret[:6]}… ({len(secret)} chars)" for secret in SECRETS if len(secret) >= 8 and secret in text]
    assert not leaked, f"secrets found in daemon logs: {leaked}"
