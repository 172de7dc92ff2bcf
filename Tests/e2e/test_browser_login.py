"""The browser login: authorization code with PKCE (RFC 7636) and a loopback redirect (RFC 8252),
against the real IdP, with the test playing the user's browser."""
import re
import subprocess
import time
from urllib.parse import parse_qs, urlparse

import pytest
import requests

from harness import BIN, GROUP, PASSWORDS, Broker

REDIRECT = "http://127.0.0.1:4600/callback"  # registered for the client by scripts/idp


def start_login(broker):
    cli = subprocess.Popen([BIN / "msso", "login", "--browser"], env=broker.env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    assert cli.stderr.readline().startswith("To log in, open this address in a browser on this machine")
    url = cli.stderr.readline().strip()
    return cli, url


def browser(idp, url, user="alice", approve=True, scope="openid app1 app2"):
    """What the user does in the browser: log in at the IdP, consent (to `scope`), follow the
    redirect home."""
    session = requests.Session()
    base = idp.issuer.rsplit("/oidc", 1)[0]
    assert session.post(f"{base}/auth/", json={"username": user, "password": PASSWORDS[user]}, timeout=5).status_code == 200
    if approve:
        assert session.put(f"{base}/auth/grant/msso", json={"scope": scope}, timeout=5).status_code == 200
    answer = session.get(url + "&g_continue", allow_redirects=False, timeout=5)
    assert answer.status_code == 302, answer.text
    return session.get(answer.headers["Location"], timeout=5)


@pytest.mark.parametrize("profile", ["bearer", "dpop"])
def test_a_browser_login_with_pkce(desktop, idp, profile):
    broker = Broker(desktop, idp, groups={GROUP: {"redirect_uri": REDIRECT, "sign": profile}})
    try:
        cli, url = start_login(broker)
        query = parse_qs(urlparse(url).query)
        assert url.startswith(f"{idp.issuer}/auth?")
        assert query["code_challenge_method"] == ["S256"] and len(query["code_challenge"][0]) == 43
        assert query["redirect_uri"] == [REDIRECT] and query["response_type"] == ["code"]
        assert len(query["state"][0]) >= 16 and query["nonce"]
        landing = browser(idp, url)
        assert landing.status_code == 200 and "Login complete" in landing.text
        out, err = cli.communicate(timeout=30)
        assert cli.returncode == 0, err
        assert f"{GROUP}: logged in" in out
        assert broker.msso("check").returncode == 0
        signed = broker.msso("sign", "--url", f"{idp.issuer}/userinfo")
        headers = dict(line.split(": ", 1) for line in signed.stdout.splitlines())
        assert requests.get(f"{idp.issuer}/userinfo", headers=headers, timeout=5).status_code == 200
    finally:
        broker.stop()


def test_a_forged_redirect_is_refused_and_the_login_keeps_waiting(desktop, idp):
    """Any local process can reach the loopback listener: a callback with another state (an
    injected code, or an attempt to abort the login) gets an error page and changes nothing."""
    broker = Broker(desktop, idp, groups={GROUP: {"redirect_uri": REDIRECT}})
    try:
        cli, url = start_login(broker)
        for forged_query in ("code=stolen&state=not-the-one", "error=access_denied&state=not-the-one", "code=stolen"):
            forged = requests.get(f"{REDIRECT}?{forged_query}", timeout=5)
            assert forged.status_code == 400 and "another login attempt" in forged.text
        assert cli.poll() is None, "the login is still waiting for the real browser"
        assert broker.msso("check").returncode == 2
        landing = browser(idp, url)
        assert landing.status_code == 200 and "Login complete" in landing.text
        out, err = cli.communicate(timeout=30)
        assert cli.returncode == 0, err
        assert broker.msso("check").returncode == 0
    finally:
        broker.stop()


def test_no_browser_within_the_wait_is_a_clear_timeout(desktop, idp):
    broker = Broker(desktop, idp, groups={GROUP: {"redirect_uri": REDIRECT, "browser_timeout": "2s"}})
    try:
        started = time.monotonic()
        cli, _ = start_login(broker)
        _, err = cli.communicate(timeout=30)
        assert cli.returncode == 6 and re.search(r"no answer from the browser within 2s", err), err
        assert time.monotonic() - started < 5
        try:
            requests.get(REDIRECT, timeout=2)
            listening = True
        except requests.ConnectionError:
            listening = False
        assert not listening, "the loopback listener closed after the login"
    finally:
        broker.stop()


def test_a_denied_login_is_a_clear_refusal(desktop, idp):
    """The redirect an IdP sends when the user says no (RFC 6749 §4.1.2.1), with the login's state."""
    broker = Broker(desktop, idp, groups={GROUP: {"redirect_uri": REDIRECT}})
    try:
        cli, url = start_login(broker)
        state = parse_qs(urlparse(url).query)["state"][0]
        landing = requests.get(f"{REDIRECT}?error=access_denied&state={state}", timeout=5)
        assert "Login refused" in landing.text
        _, err = cli.communicate(timeout=30)
        assert cli.returncode == 6 and "refused the browser login (access_denied)" in err, err
        assert broker.msso("check").returncode == 2
    finally:
        broker.stop()
