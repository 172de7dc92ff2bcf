"""Every verb's happy path, against a real keyring and a real IdP."""
import json
import re
import subprocess
import time

import pytest

from harness import BIN, GROUP, SECRETS, Broker, sleep_until, wait_for


def test_login_stores_one_item_with_secrets_only_in_the_payload(broker, desktop, idp):
    assert broker.msso("check").returncode == 2
    before = time.time()
    done = broker.login()
    assert done.returncode == 0, done.stderr
    assert f"{GROUP}: logged in as alice, session valid until" in done.stdout

    attributes, secret = desktop.keyring_item()
    assert attributes["group"] == GROUP and attributes["issuer"] == idp.issuer
    assert attributes["xdg:schema"] == "org.msso.Credential"
    for value in attributes.values():  # attributes are readable while locked: no token there
        assert len(value) < 100
    assert secret["refreshToken"] and secret["accessToken"]
    SECRETS.update([secret["refreshToken"], secret["accessToken"]])
    assert before + 1800 - 5 <= secret["sessionExpiresAt"] <= time.time() + 1800
    assert secret["sessionMaxAt"] == pytest.approx(secret["loggedInAt"] + 12 * 3600)


def test_status_and_check_report_the_session(broker):
    broker.login()
    status = json.loads(broker.msso("status", "--json").stdout)["groups"][0]
    assert status["state"] == "valid" and status["username"] == "alice"
    assert status["sessionExpiresAt"] - time.time() == pytest.approx(1800, abs=10)
    check = broker.msso("check")
    assert check.returncode == 0 and "logged in as alice" in check.stdout
    assert broker.msso("check", "--quiet").stdout == ""


def test_sign_returns_a_bearer_header_the_idp_accepts(broker, idp):
    broker.login()
    done = broker.msso("sign", "--method", "GET", "--url", "https://api.example.com/items?x=1")
    assert done.returncode == 0, done.stderr
    name, _, value = done.stdout.strip().partition(": ")
    assert name == "Authorization" and value.startswith("Bearer ")
    # The IdP's own userinfo endpoint accepts the token: it is a real, live access token.
    userinfo = subprocess.run(["curl", "-sf", "-H", done.stdout.strip(), f"{idp.issuer}/userinfo"],
                              capture_output=True, text=True)
    assert userinfo.returncode == 0 and json.loads(userinfo.stdout)["sub"]
    signed = json.loads(broker.msso("sign", "--json", "--url", "https://api.example.com/").stdout)
    assert signed["headers"][0][0] == "Authorization"


@pytest.mark.parametrize("header", ["no-colon", ":", " : value", ":value"])
def test_sign_refuses_a_header_without_a_name(header):
    """`--header` takes `Name: value`; a line without a name is refused with the form it takes (":"
    used to stop msso with a trap), before any broker is asked."""
    done = subprocess.run([BIN / "msso", "sign", "--url", "https://api.example.com/", "--header", header],
                          capture_output=True, text=True, timeout=30, env={"XDG_RUNTIME_DIR": "/nonexistent"})
    assert done.returncode == 64, (done.returncode, done.stderr)
    assert f'--header takes `Name: value`, got "{header}"' in done.stderr


def test_sign_with_a_named_header_profile(desktop, idp):
    daemon = Broker(desktop, idp, groups={GROUP: {"sign": "header:auth-token"}})
    try:
        daemon.login()
        done = daemon.msso("sign", "--url", "https://api.example.com/")
        assert re.fullmatch(r"auth-token: \S{40,}\n", done.stdout), done.stdout
    finally:
        daemon.stop()


def test_sign_never_returns_the_refresh_token(broker, desktop):
    broker.login()
    _, secret = desktop.keyring_item()
    signed = broker.msso("sign", "--json", "--url", "https://api.example.com/", "--header", "Accept: */*").stdout
    assert secret["refreshToken"] not in signed


def test_extend_slides_the_window_and_writes_it(desktop, idp):
    daemon = Broker(desktop, idp, groups={GROUP: {"session_timeout": "10s", "session_max": "1h"}})
    try:
        first = json.loads(daemon.login().stdout.strip() and daemon.msso("check", "--json").stdout)
        # No wait: the window is 10 s from the moment extend ran, which is later than the login's
        # (the times are to the microsecond). A window left where it was fails the bracket.
        before = time.time()
        extended = json.loads(daemon.msso("extend", "--json").stdout)
        after = time.time()
        assert before + 10 <= extended["sessionExpiresAt"] <= after + 10, (before, extended, after)
        assert extended["sessionExpiresAt"] > first["sessionExpiresAt"]
        # To the millisecond: pytest.approx's default (a millionth) is half an hour of a time since 1970.
        assert desktop.keyring_item()[1]["sessionExpiresAt"] == pytest.approx(extended["sessionExpiresAt"], abs=1e-3)
    finally:
        daemon.stop()


def test_extend_never_passes_session_max(desktop, idp):
    daemon = Broker(desktop, idp, groups={GROUP: {"session_timeout": "3s", "session_max": "4s"}})
    try:
        daemon.login()
        status = daemon.status_json()
        # Until a window of 3 s from now would pass session_max, with time to spare before the window ends.
        sleep_until(status["sessionMaxAt"] - 3 + 0.3)
        extended = json.loads(daemon.msso("extend", "--json").stdout)
        assert extended["sessionExpiresAt"] == pytest.approx(status["sessionMaxAt"])
    finally:
        daemon.stop()


def test_window_passing_expires_the_session(desktop, idp):
    daemon = Broker(desktop, idp, groups={GROUP: {"session_timeout": "2s", "session_max": "1h"}})
    try:
        daemon.login()
        assert daemon.msso("sign", "--url", "https://api.example.com/").returncode == 0
        window = daemon.status_json()["sessionExpiresAt"]
        wait_for(lambda: daemon.msso("check").returncode == 1, interval=0.1, what="the window to pass")
        assert time.time() >= window - 0.05, "the session expired before its window passed"
        sign = daemon.msso("sign", "--url", "https://api.example.com/")
        assert sign.returncode == 1 and "has expired; run `msso login" in sign.stderr
        assert daemon.msso("check").returncode == 1
        assert daemon.msso("extend").returncode == 1
        assert daemon.login().returncode == 0
        assert daemon.msso("check").returncode == 0
    finally:
        daemon.stop()


def test_logout_deletes_the_item_and_revokes(broker, desktop, idp):
    broker.login()
    _, secret = desktop.keyring_item()
    done = broker.msso("logout")
    assert done.returncode == 0 and done.stdout.strip() == f"Logged out of {GROUP}."
    assert desktop.keyring_item() is None
    assert broker.msso("check").returncode == 2
    assert broker.msso("sign", "--url", "https://api.example.com/").returncode == 2
    # RFC 7009: the refresh token is dead at the IdP.
    introspect = subprocess.run(["curl", "-s", "-u", f"msso:{idp.secret_file.read_text()}", "-d",
                                 f"token={secret['refreshToken']}", f"{idp.issuer}/introspect"],
                                capture_output=True, text=True)
    assert json.loads(introspect.stdout)["active"] is False
    assert "revocation" not in broker.log.read_text(), "the IdP's empty 200 is a successful revocation"
    again = broker.msso("logout", "--json")
    assert again.returncode == 0 and json.loads(again.stdout) == {"loggedOut": []}


def test_logout_all_and_the_logout_utility(desktop, idp):
    daemon = Broker(desktop, idp, groups={GROUP: {}, "com.example.other": {}})
    try:
        daemon.login(group=GROUP)
        daemon.login(group="com.example.other")
        done = daemon.msso(binary="msso-logout")
        assert done.returncode == 0
        assert done.stdout.strip() == f"Logged out of com.example.other, {GROUP}."
        assert desktop.keyring_item(GROUP) is None and desktop.keyring_item("com.example.other") is None
        nothing = daemon.msso(binary="msso-logout")
        assert nothing.returncode == 0 and nothing.stdout.strip() == "No SSO session was active."
        daemon.login(group=GROUP)
        assert daemon.msso("logout", "--all").stdout.strip() == f"Logged out of {GROUP}."
        assert daemon.msso("sign", "--url", "https://x.example/").returncode == 64, "two groups: --group needed"
    finally:
        daemon.stop()


def test_device_login_shows_the_code_and_waits_for_approval(broker, idp):
    cli = subprocess.Popen([BIN / "msso", "login"], env=broker.env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    prompt = cli.stderr.readline()
    match = re.match(r"To log in, open (\S+) and enter the code (\S+)$", prompt.strip())
    assert match, prompt
    assert match.group(1).startswith(idp.issuer)
    assert "Waiting for approval" in cli.stderr.readline() + cli.stderr.readline()
    idp.approve_device(match.group(2))
    out, _ = cli.communicate(timeout=30)
    assert cli.returncode == 0, out
    assert f"{GROUP}: logged in" in out
    assert broker.msso("check").returncode == 0


def test_wrong_password_is_refused_and_stores_nothing(broker, desktop):
    started = time.monotonic()
    done = broker.login(password="not-the-password")
    assert done.returncode == 6
    assert "refused the username or password" in done.stderr
    assert time.monotonic() - started < 5
    assert desktop.keyring_item() is None


def test_every_verb_speaks_json(broker):
    broker.login()
    for argv in (["status"], ["check"], ["extend"], ["sign", "--url", "https://a.example/"], ["logout"]):
        done = broker.msso(*argv, "--json")
        assert done.returncode == 0, (argv, done.stderr)
        json.loads(done.stdout)
    failed = broker.msso("sign", "--json", "--url", "https://a.example/")
    assert failed.returncode == 2 and json.loads(failed.stdout)["error"] == "NotLoggedIn"


def test_sigterm_shuts_down_cleanly_and_keeps_the_session(broker):
    broker.login()
    broker.process.terminate()
    assert broker.process.wait(timeout=10) == 0
    assert not broker.socket.exists(), "the socket file is removed"
    assert broker.msso("check").returncode == 3, "unreachable, and the CLI says so"
    broker.start()
    assert broker.msso("check").returncode == 0


def test_the_daemon_goes_by_its_own_name(broker):
    """mssod re-executes itself (through /proc/self/exe, to switch Swift's backtracer off): it must
    still be `mssod` to ps, top and `pgrep -x mssod`, not `exe`."""
    assert open(f"/proc/{broker.process.pid}/comm").read().strip() == "mssod"
    found = subprocess.run(["pgrep", "-x", "mssod"], capture_output=True, text=True).stdout.split()
    assert str(broker.process.pid) in found
