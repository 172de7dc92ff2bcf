"""The access-token clock against the real IdP: silent refresh, rotation stored, one refresh for many signs."""
import subprocess

import pytest

from harness import BIN, GROUP, SECRETS, Broker, IdP, sleep_until


@pytest.fixture
def short_lived_idp():
    provider = IdP(token_ttl=40)
    yield provider
    provider.cleanup()


def introspect(idp, token):
    return idp.introspect(token)["active"]


def test_many_concurrent_signs_near_expiry_cause_one_rotating_refresh(desktop, short_lived_idp):
    idp = short_lived_idp
    # Tokens live 40 s; a sign refreshes when fewer than 38 s are left, i.e. 2 s after login.
    broker = Broker(desktop, idp, groups={GROUP: {"refresh_lead": "38s"}})
    try:
        assert broker.login().returncode == 0
        _, before = desktop.keyring_item()
        SECRETS.update([before["accessToken"], before["refreshToken"]])
        first = broker.msso("sign", "--url", "https://api.example.com/").stdout.strip()
        assert first == f"Authorization: Bearer {before['accessToken']}", "a fresh token is served as is"

        sleep_until(before["accessTokenExpiresAt"] - 38 + 0.1)  # within the refresh lead
        signers = [subprocess.Popen([BIN / "msso", "sign", "--url", "https://api.example.com/"], env=broker.env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(16)]
        outputs = [signer.communicate(timeout=30) for signer in signers]
        assert all(signer.returncode == 0 for signer in signers), [err for _, err in outputs]
        headers = {out.strip() for out, _ in outputs}
        assert len(headers) == 1, "every concurrent sign got the same refreshed token"
        new_token = headers.pop().split(" ", 2)[2]
        SECRETS.add(new_token)
        assert new_token != before["accessToken"]

        _, after = desktop.keyring_item()
        SECRETS.update([after["accessToken"], after["refreshToken"]])
        assert after["accessToken"] == new_token, "the refreshed token was stored"
        assert after["refreshToken"] != before["refreshToken"], "the rotated refresh token was stored"
        assert after["sessionExpiresAt"] == before["sessionExpiresAt"], "a refresh does not move the session window"
        assert broker.log.read_text().count("access token refreshed") == 1
        assert introspect(idp, after["refreshToken"]) is True
        assert introspect(idp, before["refreshToken"]) is False, "the IdP rotated: the old refresh token is spent"
    finally:
        broker.stop()


def test_refresh_survives_a_restart(desktop, short_lived_idp):
    broker = Broker(desktop, short_lived_idp, groups={GROUP: {"refresh_lead": "38s"}})
    try:
        broker.login()
        sleep_until(broker.status_json()["accessTokenExpiresAt"] - 38 + 0.1)  # within the refresh lead
        assert broker.msso("sign", "--url", "https://api.example.com/").returncode == 0
        broker.restart()
        sleep_until(broker.status_json()["accessTokenExpiresAt"] - 38 + 0.1)  # the refreshed token, likewise
        done = broker.msso("sign", "--url", "https://api.example.com/")
        assert done.returncode == 0, "the stored (rotated) refresh token works after a restart"
    finally:
        broker.stop()
