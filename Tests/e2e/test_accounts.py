"""The account each group logs in as (docs/SECURITY.md, "Which account the suite acts as"): an outside
test had any program of the user run `msso login --browser`, or join the user's own waiting login,
and finish it at the IdP as an account of its own; the suite's apps then acted as that account.
Now a group remembers its account (across logouts and restarts), a login as another is refused and
stores nothing, a change is asked for (`--new-account`) and announced, and an administrator can
tie a group to the login user. Against glewlwyd, with alice and bob."""
import json
import os
import signal
import sqlite3
import subprocess
from urllib.parse import parse_qs, urlparse

import pytest

from harness import BIN, GROUP, PASSWORDS, Broker, Desktop, RawClient, free_port
from test_browser_login import browser

STATE = (".local", "state", "msso", "accounts.json")


def enabled_refresh_tokens(idp, user) -> int:
    """The user's refresh tokens glewlwyd still honours (a revoked one is disabled)."""
    with sqlite3.connect(idp.dir / "glewlwyd.db") as db:
        return db.execute("SELECT count(*) FROM gpo_refresh_token WHERE gpor_username = ? AND gpor_enabled = 1",
                          (user,)).fetchone()[0]


def stored(desktop):
    """The group's session as the keyring holds it."""
    item = desktop.keyring_item()
    return item and item[1]


def login(broker, user, *argv):
    return broker.msso("login", "--username", user, "--password-stdin", *argv, input=PASSWORDS[user] + "\n")


def test_a_login_as_another_account_is_refused_stores_nothing_and_keeps_alices_session(broker, desktop, idp):
    assert login(broker, "alice").returncode == 0
    alices = stored(desktop)
    bobs_before = enabled_refresh_tokens(idp, "bob")

    refused = login(broker, "bob")
    assert refused.returncode == 6, refused.stderr
    for words in ("came back as bob", f'the account of "{GROUP}" is alice', "nothing was stored",
                  f"msso login --group {GROUP} --new-account"):
        assert words in refused.stderr, refused.stderr
    assert stored(desktop) == alices, "alice's session, untouched"
    assert broker.status_json()["state"] == "valid" and broker.status_json()["username"] == "alice"
    assert enabled_refresh_tokens(idp, "bob") == bobs_before, "bob's refresh token was revoked"

    # After a logout too: the account outlives the session.
    assert broker.msso("logout").returncode == 0
    again = login(broker, "bob")
    assert again.returncode == 6 and "came back as bob" in again.stderr, again.stderr
    assert broker.status_json()["state"] == "notLoggedIn" and stored(desktop) is None


@pytest.fixture(scope="module")
def redirect(idp):
    """A loopback redirect of the module's own for browser logins (runs in parallel do not meet)."""
    uri = f"http://127.0.0.1:{free_port()}/callback"
    idp.allow_redirect(uri)
    return uri


def start_browser_login(broker, *argv):
    """`msso login --browser`, and the address it prints (as any program that runs it reads it)."""
    cli = subprocess.Popen([BIN / "msso", "login", "--browser", *argv], env=broker.env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    lines = []
    while not lines or not lines[-1].startswith("http"):
        line = cli.stderr.readline()
        assert line, "".join(lines) + cli.stderr.read()
        lines.append(line)
    return cli, lines[-1].strip(), "".join(lines)


def test_a_joined_browser_login_finished_by_another_account_is_refused(desktop, idp, redirect):
    """The outside test's second attack: the user's browser login waits; another program runs
    `msso login --browser`, joins it, is shown its address and finishes it first, as bob."""
    broker = Broker(desktop, idp, groups={GROUP: {"redirect_uri": redirect, "scopes": ["openid", "app1", "profile"]}})
    try:
        assert login(broker, "alice").returncode == 0  # the group's account
        alices = stored(desktop)
        user, url, _ = start_browser_login(broker)
        attacker, joined_url, said = start_browser_login(broker)
        assert "already waiting" in said and joined_url == url, said
        landing = browser(idp, joined_url, user="bob", scope="openid app1 profile")
        assert landing.status_code == 200, landing.text  # glewlwyd sent bob's code back to the listener
        for cli in (attacker, user):
            _, err = cli.communicate(timeout=30)
            assert cli.returncode == 6 and "came back as bob" in err and f'the account of "{GROUP}" is alice' in err, err
        assert stored(desktop) == alices
        assert broker.status_json()["username"] == "alice"
    finally:
        broker.stop()


def audit_logins(broker):
    return [row for row in json.loads(broker.msso("audit", "--json").stdout) if row["verb"] == "login"]


def test_new_account_switches_and_is_announced(desktop, idp):
    from test_notifications import Dunst, wait_for_notification
    dunst = Dunst(desktop)
    broker = Broker(desktop, idp)
    try:
        first = login(broker, "alice", "--json")
        assert first.returncode == 0 and json.loads(first.stdout)["newAccount"] is True, first.stdout
        assert "alice is now the account of" in first.stderr
        shown = wait_for_notification(dunst, f"SSO for {GROUP}: now logged in as alice")
        assert "the group's first account" in shown["body"], shown
        assert audit_logins(broker)[-1]["detail"] == "new account: alice, the group's first"

        switched = login(broker, "bob", "--new-account", "--json")
        assert switched.returncode == 0, switched.stderr
        status = json.loads(switched.stdout)
        assert (status["username"], status["newAccount"], status["previousAccount"]) == ("bob", True, "alice")
        assert "bob is now the account of" in switched.stderr and "in place of alice" in switched.stderr
        shown = wait_for_notification(dunst, f"SSO for {GROUP}: now logged in as bob")
        assert "no longer as alice" in shown["body"] and f"msso logout --group {GROUP}" in shown["body"], shown
        row = audit_logins(broker)[-1]
        assert row["detail"] == "new account: bob, was alice" and row["executable"].endswith("/msso"), row

        # The same account again is no news; the other one is refused now.
        again = login(broker, "bob", "--json")
        assert again.returncode == 0 and "newAccount" not in json.loads(again.stdout)
        assert login(broker, "alice").returncode == 6
    finally:
        broker.stop()
        dunst.stop()


def test_an_app_may_not_ask_for_a_new_account(broker):
    """Only the msso command changes a group's account: not an app (a sandboxed one above all)."""
    client = RawClient(broker.socket)  # the test's Python, registered for the group
    try:
        answer = client.call("login", {"flow": "password", "username": "bob", "password": PASSWORDS["bob"], "newAccount": True})
    finally:
        client.close()
    assert answer.get("error") == "Forbidden" and "--new-account" in answer["message"], answer
    assert broker.status_json()["state"] == "notLoggedIn"


def test_the_groups_first_login_is_not_joined(broker):
    """A login that may set the group's account (here its first) shows its code to the program that
    started it alone: another is refused, naming that program, instead of being shown the code."""
    first = subprocess.Popen([BIN / "msso", "login", "--device"], env=broker.env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        shown = ""
        while "enter the code" not in shown:  # its code shown: the login waits for the user
            line = first.stderr.readline()
            assert line, shown
            shown += line
        second = broker.msso("login", "--device", timeout=30)
        assert second.returncode == 3, second.stderr
        assert f"started by {BIN.resolve() / 'msso'} (pid {first.pid})" in second.stderr, second.stderr
        assert "enter the code" not in second.stderr
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=30)


def test_the_administrators_rule_ties_the_group_to_the_login_user(idp):
    """`account = "login-user"` in the administrator's file: the ID token's preferred_username must
    be the Unix user's name (mssod runs as uid 1001, msso-test-user, who is a user of the IdP too)."""
    idp.add_user("msso-test-user", "msso-test-user-pass")
    desktop = Desktop(uid=1001)
    # The secret inline: the IdP's file is root's, and mssod runs as uid 1001 here.
    broker = Broker(desktop, idp, groups={GROUP: {"scopes": ["openid", "app1", "profile"], "account": "login-user",
                                                  "client_secret_file": None, "client_secret": idp.secret_file.read_text()}})
    try:
        for argv in ((), ("--new-account",)):
            refused = login(broker, "bob", *argv)
            assert refused.returncode == 6, refused.stderr
            assert "came back as bob (`preferred_username`)" in refused.stderr, refused.stderr
            assert "your login name, msso-test-user" in refused.stderr, refused.stderr
        assert broker.status_json()["state"] == "notLoggedIn"
        done = login(broker, "msso-test-user")
        assert done.returncode == 0, done.stderr
        assert broker.status_json()["username"] == "msso-test-user"
    finally:
        broker.stop()
        desktop.cleanup()


def test_a_restart_keeps_the_account(broker, desktop):
    assert login(broker, "alice").returncode == 0
    assert broker.msso("logout").returncode == 0
    broker.restart()
    refused = login(broker, "bob")
    assert refused.returncode == 6 and f'the account of "{GROUP}" is alice' in refused.stderr, refused.stderr
    kept = json.loads(desktop.home.joinpath(*STATE).read_text())
    assert kept["groups"][GROUP]["username"] == "alice"


def test_a_damaged_or_hostile_record_is_no_account_and_never_shown_raw(desktop, idp):
    record = desktop.home.joinpath(*STATE)
    record.parent.mkdir(parents=True, exist_ok=True)
    broker = Broker(desktop, idp, start=False)
    try:
        # A record msso could not have written: the group knows no account, so the next login is
        # a new one, and announced as such.
        record.write_text('{"version": 1, "groups": ')
        broker.start()
        first = login(broker, "alice", "--json")
        assert first.returncode == 0 and json.loads(first.stdout)["newAccount"] is True, first.stdout
        assert broker.logged("the groups' accounts could not all be read")
        assert json.loads(record.read_text())["groups"][GROUP]["username"] == "alice", "written afresh"
        broker.stop()

        # A hostile entry: a name holding a terminal escape, and a subject nobody logs in as. The
        # name is dropped (never shown), the subject still counts: alice is refused, named safely.
        hostile = json.loads(record.read_text())
        hostile["groups"][GROUP].update(subject="someone-else", username="\u001b]0;pwned\u0007mallory")
        record.write_text(json.dumps(hostile))
        broker.start()
        refused = login(broker, "alice")
        assert refused.returncode == 6, refused.stderr
        assert f'the account of "{GROUP}" is the account with subject someone-else' in refused.stderr, refused.stderr
        assert "\u001b" not in refused.stderr and "pwned" not in refused.stderr
        assert broker.msso("logout").returncode == 0  # (a stored session would name the account itself)
        broker.stop()

        # A link to a record naming bob is not followed.
        elsewhere = desktop.home / "elsewhere.json"
        bobs = json.loads(record.read_text())
        bobs["groups"][GROUP].update(subject="bobs-sub", username="bob")
        elsewhere.write_text(json.dumps(bobs))
        record.unlink()
        os.symlink(elsewhere, record)
        broker.start()
        linked = login(broker, "alice", "--json")
        assert linked.returncode == 0 and json.loads(linked.stdout)["newAccount"] is True, linked.stderr
        assert not record.is_symlink(), "replaced by a file of mssod's own"
    finally:
        broker.stop()
