"""Several accounts per group, end to end against glewlwyd (alice and bob): a session per account,
each with its own keyring item, tokens and user; the account a call names (`--account`,
MSSO_ACCOUNT, the user name in a git remote's URL, a registration's `account`) else the group's
default; logout of one or of all; the limits; and a session stored by the release before accounts,
read as the default account without a new login."""
import json
import os
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from harness import BIN, GROUP, PASSWORDS, SECRETS, Broker
from test_tools import git, git_env, repos, server  # noqa: F401 (fixtures: a bare repository, the token server)

ADMIN_ITEM = f"{GROUP}\x1fadmin"  # the keyring's group attribute of the account admin (AccountName.storeName)
URL = "https://api.example.com/items"
PREVIOUS = os.environ.get("MSSO_PREVIOUS_BIN")  # the previous release's build: mssod, mssod-idp and msso


def login(broker, user, *argv, account=None, **kwargs):
    argv = [*argv, *(["--account", account] if account else [])]
    return broker.msso("login", "--username", user, "--password-stdin", *argv, input=PASSWORDS[user] + "\n", **kwargs)


def user_of(idp, token):
    """Whose token it is, as glewlwyd says (RFC 7662); None when it is not active there."""
    SECRETS.add(token)
    said = idp.introspect(token)
    return said.get("username") if said.get("active") else None


def token(broker, *argv):
    done = subprocess.run([BIN / "msso", "token", *argv], env=broker.env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    SECRETS.add(done.stdout.strip())
    return done.stdout.strip()


def item(desktop, group=GROUP):
    """The session's keyring item, (attributes, credential), or None."""
    found = desktop.keyring_item(group)
    if found and found[1]:
        SECRETS.update(v for k, v in found[1].items() if k.endswith("Token"))
    return found


def enabled_refresh_tokens(idp, user) -> int:
    """The user's refresh tokens glewlwyd still honours (a revoked one is disabled)."""
    with sqlite3.connect(idp.dir / "glewlwyd.db") as db:
        return db.execute("SELECT count(*) FROM gpo_refresh_token WHERE gpor_username = ? AND gpor_enabled = 1",
                          (user,)).fetchone()[0]


@pytest.fixture
def two(desktop, idp):
    """alice in the group's default account, bob in the account admin."""
    daemon = Broker(desktop, idp)
    try:
        assert login(daemon, "alice").returncode == 0
        bob = login(daemon, "bob", account="admin")
        assert bob.returncode == 0, bob.stderr
        yield daemon
    finally:
        daemon.stop()


def test_two_accounts_are_logged_in_at_once_and_status_shows_both(two, desktop):
    listed = two.msso("status")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert any(line.startswith(f"{GROUP}: logged in as alice, session valid until") for line in lines), lines
    assert any(line.startswith(f"{GROUP} (account admin): logged in as bob, session valid until") for line in lines), lines

    groups = json.loads(two.msso("status", "--json").stdout)["groups"]
    assert [(s["group"], s["account"], s["username"], s["state"], s.get("isDefault")) for s in groups] == [
        (GROUP, "default", "alice", "valid", True), (GROUP, "admin", "bob", "valid", None)], groups
    one = json.loads(two.msso("status", "--json", "--account", "admin").stdout)["groups"]
    assert [(s["account"], s["username"]) for s in one] == [("admin", "bob")]
    assert json.loads(two.msso("check", "--json").stdout)["username"] == "alice", "a call naming no account: the default"

    # Each its own item: the default account where the group's only session always was.
    (alices_attributes, alices), (bobs_attributes, bobs) = item(desktop), item(desktop, ADMIN_ITEM)
    assert (alices_attributes["group"], alices["username"]) == (GROUP, "alice")
    assert (bobs_attributes["group"], bobs["username"]) == (ADMIN_ITEM, "bob")
    assert alices["accessToken"] != bobs["accessToken"] and alices["refreshToken"] != bobs["refreshToken"]


def test_two_shells_sign_at_once_each_as_its_own_user(two, idp):
    """Two terminals, one with MSSO_ACCOUNT=admin: twenty `msso sign` and `msso token` started
    together, every token handed out introspected at glewlwyd."""
    started = []
    for n in range(20):
        env = dict(two.env, **({"MSSO_ACCOUNT": "admin"} if n % 2 else {}))
        argv = ["sign", "--url", URL] if n % 4 < 2 else ["token"]
        started.append((n % 2, subprocess.Popen([BIN / "msso", *argv], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                text=True)))
    seen = {}
    for admin, process in started:
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
        handed = out.strip().removeprefix("Authorization: Bearer ")
        assert handed and " " not in handed, out
        seen.setdefault(handed, set()).add(admin)
    users = {handed: user_of(idp, handed) for handed in seen}
    for handed, shells in seen.items():
        assert shells == {1} and users[handed] == "bob" or shells == {0} and users[handed] == "alice", (shells, users[handed])
    assert {users[t] for t in seen} == {"alice", "bob"}


def test_git_takes_the_account_from_the_remotes_user_name(two, idp, server, tmp_path):
    two.register("git-helper", [BIN / "git-credential-msso"], [GROUP])  # as the administrator would
    env = git_env(two, tmp_path / "home")
    for remote, user in ((f"http://admin@127.0.0.1:{server.port}/git/suite.git", "bob"),
                         (f"{server.url}/git/suite.git", "alice")):
        server.seen.clear()
        listed = git(["ls-remote", remote], env)
        assert listed.returncode == 0 and "refs/heads/main" in listed.stdout, listed.stderr
        assert server.seen and {user_of(idp, seen) for seen in server.seen} == {user}, remote
    # MSSO_ACCOUNT before the URL's user name.
    server.seen.clear()
    assert git(["ls-remote", f"http://admin@127.0.0.1:{server.port}/git/suite.git"], dict(env, MSSO_ACCOUNT="default")).returncode == 0
    assert {user_of(idp, seen) for seen in server.seen} == {"alice"}


def test_logout_of_one_account_leaves_the_other_signing_and_all_ends_both_at_the_idp(two, desktop, idp):
    alices, bobs = item(desktop)[1], item(desktop, ADMIN_ITEM)[1]
    out = two.msso("logout", "--account", "admin")
    assert out.returncode == 0 and f"Logged out of {GROUP} (account admin)." in out.stdout, out.stdout + out.stderr
    assert user_of(idp, bobs["accessToken"]) is None and user_of(idp, bobs["refreshToken"]) is None, "revoked at glewlwyd"
    assert item(desktop, ADMIN_ITEM) is None and item(desktop)[1] == alices
    signed = two.msso("sign", "--url", URL)
    assert signed.returncode == 0 and user_of(idp, signed.stdout.strip().removeprefix("Authorization: Bearer ")) == "alice"
    gone = two.msso("sign", "--url", URL, "--account", "admin")
    assert gone.returncode == 2 and f"run `msso login --group {GROUP} --account admin`" in gone.stderr, gone.stderr

    assert login(two, "bob", account="admin").returncode == 0
    bobs = item(desktop, ADMIN_ITEM)[1]
    every = two.msso("logout", "--all")
    assert every.returncode == 0, every.stderr
    assert f"Logged out of {GROUP}, {GROUP} (account admin)." in every.stdout, every.stdout
    for ended in (alices, bobs):
        for kind in ("accessToken", "refreshToken"):
            assert user_of(idp, ended[kind]) is None, f"{ended['username']}'s {kind} is still active at glewlwyd"
    assert item(desktop) is None and item(desktop, ADMIN_ITEM) is None
    states = {(s["account"], s["state"]) for s in json.loads(two.msso("status", "--json").stdout)["groups"]}
    assert states == {("default", "notLoggedIn")}, states  # an account logged out is no longer listed


# ---- A session stored by the previous release ------------------------------------------------

def swift_json(value) -> str:
    """JSON as Swift's JSONEncoder writes it: no spaces, `/` escaped. (The order of an object's keys
    is its own: a hash order, another in each process.)"""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).replace("/", "\\/")


def previous_release_item(credential):
    """The keyring item the release before accounts stored for a group's session, field for field
    (SecretServiceStore and the libsecret shim of af4c4ce: schema org.msso.Credential, attributes
    group and issuer, the label, the whole Credential as JSON, sent as application/json)."""
    return {"label": f"msso credential for {GROUP}", "contentType": "application/json", "secret": swift_json(credential),
            "attributes": {"xdg:schema": "org.msso.Credential", "group": GROUP, "issuer": credential["issuer"]}}


def as_stored(read, written):
    """Whether an item read back is `written`: gnome-keyring keeps no content type (it answers
    text/plain for every item, msso's own too), and JSON's key order does not matter."""
    return (read["label"], read["attributes"], json.loads(read["secret"])) == (
        written["label"], written["attributes"], json.loads(written["secret"]))


def credential_items(desktop):
    """The group's default account's credential items (not another account's, nor a key)."""
    return desktop.secret_items(**{"xdg:schema": "org.msso.Credential", "group": GROUP})


def password_grant(idp, user):
    """A login at glewlwyd without msso (its password grant, as the previous release asked it)."""
    import base64
    import requests
    answer = requests.post(f"{idp.issuer}/token", auth=("msso", idp.secret_file.read_text()), timeout=10,
                           data={"grant_type": "password", "username": user, "password": PASSWORDS[user], "scope": "openid app1"})
    assert answer.status_code == 200, answer.text
    tokens = answer.json()
    SECRETS.update(v for k, v in tokens.items() if k.endswith("_token"))
    claims = json.loads(base64.urlsafe_b64decode(tokens["id_token"].split(".")[1] + "=="))
    return tokens, claims["sub"]


def test_a_session_the_previous_release_stored_is_the_default_account_without_a_new_login(desktop, idp):
    """The item written as the previous release wrote it (previous_release_item; the test below
    holds it to the previous release's own when that build is at hand) is read by the new mssod
    as the group's default account, valid, and its token is the one handed out."""
    tokens, subject = password_grant(idp, "alice")
    now = time.time() + 0.25  # (a time with a fraction, as a real one has)
    credential = {"issuer": idp.issuer, "username": "alice", "accessToken": tokens["access_token"],
                  "refreshToken": tokens["refresh_token"], "accessTokenExpiresAt": now + tokens["expires_in"], "loggedInAt": now,
                  "sessionExpiresAt": now + 1800, "sessionMaxAt": now + 43200, "subject": subject}
    written = previous_release_item(credential)
    desktop.store_secret_item(written["label"], written["attributes"], written["secret"], written["contentType"])
    [stored] = credential_items(desktop)
    assert as_stored(stored, written)
    alices_refresh_tokens = enabled_refresh_tokens(idp, "alice")

    broker = Broker(desktop, idp)
    try:
        upgraded_without_a_new_login(broker, desktop, idp, stored, tokens["access_token"])
        assert enabled_refresh_tokens(idp, "alice") == alices_refresh_tokens, "alice never logged in again"
    finally:
        broker.stop()


def upgraded_without_a_new_login(broker, desktop, idp, stored, access_token):
    """What the new mssod must make of the previous release's item, `stored` as read back."""
    groups = json.loads(broker.msso("status", "--json").stdout)["groups"]
    assert [(s["account"], s["state"], s["username"], s.get("isDefault")) for s in groups] == [
        ("default", "valid", "alice", True)], groups
    assert token(broker) == access_token, "the stored session's own token, no login in between"
    assert user_of(idp, access_token) == "alice"
    assert credential_items(desktop) == [stored], "read where it was, not written anew"
    # The account it was is kept: bob is refused there, and welcome beside it.
    refused = login(broker, "bob")
    assert refused.returncode == 6 and f'the account of "{GROUP}" is alice' in refused.stderr, refused.stderr
    assert login(broker, "bob", account="admin").returncode == 0
    assert credential_items(desktop) == [stored]
    assert token(broker) == access_token and user_of(idp, token(broker, "--account", "admin")) == "bob"


@pytest.mark.skipif(not PREVIOUS, reason="MSSO_PREVIOUS_BIN is not set: it names a build of the release before accounts "
                    "(git worktree add /work/wt-prev af4c4ce; swift build --scratch-path /work/wt-prev/.build; "
                    "MSSO_PREVIOUS_BIN=/work/wt-prev/.build/debug), which CI does not make")
def test_a_session_the_previous_releases_own_mssod_stored_is_the_default_account(desktop, idp, tmp_path):
    """The previous release's mssod and msso log alice in; the new mssod, started on the same
    keyring and state directory, reads her session as the default account with no new login."""
    previous = Path(PREVIOUS)
    # mssod counts the msso beside it as the user's own tool: a copy of the three, root's, together.
    directory = tmp_path / "previous"
    directory.mkdir()
    for name in ("mssod", "mssod-idp", "msso"):
        shutil.copy2(previous / name, directory / name)
    broker = Broker(desktop, idp, executable=directory / "mssod", start=False)
    broker.register("previous-msso", [directory / "msso"], [GROUP])  # (sign and token need a registration)
    try:
        broker.start()
        logged = login(broker, "alice", binary=directory / "msso")
        assert logged.returncode == 0, logged.stderr
        old = subprocess.run([directory / "msso", "token"], env=broker.env, capture_output=True, text=True, timeout=60)
        assert old.returncode == 0, old.stderr
        access_token = old.stdout.strip()
        SECRETS.add(access_token)
        [stored] = credential_items(desktop)
        credential = json.loads(stored["secret"])
        SECRETS.update(v for k, v in credential.items() if k.endswith("Token"))
        # The test above writes this very item: its attributes, label, JSON and the JSON's form.
        assert as_stored(stored, previous_release_item(credential)), stored
        assert stored["secret"] == swift_json(credential), "compact, `/` escaped"
        assert set(credential) == {"issuer", "username", "accessToken", "refreshToken", "accessTokenExpiresAt", "loggedInAt",
                                   "sessionExpiresAt", "sessionMaxAt", "subject"}, credential

        broker.stop()
        broker.executable = BIN / "mssod"
        broker.start()
        upgraded_without_a_new_login(broker, desktop, idp, stored, access_token)
    finally:
        broker.stop()


# ---- Limits ---------------------------------------------------------------------------------

def test_a_seventeenth_account_is_refused_and_the_sentence_says_what_to_do(broker, desktop):
    names = ["default", *[f"a{n}" for n in range(1, 16)]]
    for name in names:
        done = login(broker, "alice", account=name)
        assert done.returncode == 0, (name, done.stderr)
    refused = login(broker, "alice", account="a16")
    assert refused.returncode == 3, refused.stderr
    assert f'"{GROUP}" already has 16 accounts logged in ({", ".join(sorted(names))}), the most it keeps; log one out first ' \
           f"(`msso logout --group {GROUP} --account NAME`)" in refused.stderr, refused.stderr
    assert item(desktop, f"{GROUP}\x1fa16") is None
    assert len(json.loads(broker.msso("status", "--json").stdout)["groups"]) == 16
    assert login(broker, "alice", account="a7").returncode == 0, "one it has may log in again"
    assert broker.msso("logout", "--account", "a7").returncode == 0
    assert login(broker, "alice", account="a16").returncode == 0, "room once one is logged out"


def test_an_account_name_that_breaks_the_rule_is_refused_naming_it(two):
    rule = "cannot name an account: use 1 to 64 letters, digits, `.`, `_`, `-`, `@` or `+`, beginning with a letter or digit"
    for name in ("a b", "a/b", "x" * 65, "\x1b]0;pwned\x07x", "é", ".hidden"):
        for done in (two.msso("token", "--account", name),
                     subprocess.run([BIN / "msso", "token"], env=dict(two.env, MSSO_ACCOUNT=name), capture_output=True, text=True),
                     login(two, "alice", account=name)):
            assert done.returncode == 64 and rule in done.stderr, (name, done.stderr)
            assert "\x1b" not in done.stderr and not done.stdout, (name, done.stderr)
    assert [s["account"] for s in json.loads(two.msso("status", "--json").stdout)["groups"]] == ["default", "admin"]


def test_an_unknown_account_names_those_the_group_has_and_how_to_log_in(two):
    done = two.msso("token", "--account", "sandbox")
    assert done.returncode == 2, done.stderr
    assert "its logged-in accounts are admin, default: name one with --account or MSSO_ACCOUNT" in done.stderr, done.stderr
    assert f"run `msso login --group {GROUP} --account sandbox`" in done.stderr, done.stderr


def test_an_account_keeps_its_user_and_another_is_refused_changing_nothing(two, desktop, idp):
    before = (item(desktop), item(desktop, ADMIN_ITEM), two.msso("status", "--json").stdout)
    alices_refresh_tokens = enabled_refresh_tokens(idp, "alice")
    refused = login(two, "alice", account="admin")
    assert refused.returncode == 6, refused.stderr
    for words in ("this login came back as alice", f'the account admin of "{GROUP}" is bob', "nothing was stored",
                  "log in with `--account NAME` (another name)", f"msso login --group {GROUP} --account admin --new-account"):
        assert words in refused.stderr, refused.stderr
    assert (item(desktop), item(desktop, ADMIN_ITEM), two.msso("status", "--json").stdout) == before
    assert enabled_refresh_tokens(idp, "alice") == alices_refresh_tokens, "the refused login's refresh token was revoked"
    assert user_of(idp, token(two, "--account", "admin")) == "bob"


# ---- An app pinned to an account ------------------------------------------------------------

def test_a_registration_pins_its_app_to_an_account(two, idp, tmp_path):
    app = tmp_path / "app"
    shutil.copy2(BIN / "msso", app)  # another program than the msso command, as far as the kernel knows
    two.register("pinned", [app], [GROUP], account="admin")
    signed = two.msso("sign", "--url", URL, binary=app)
    assert signed.returncode == 0, signed.stderr
    assert user_of(idp, signed.stdout.strip().removeprefix("Authorization: Bearer ")) == "bob", "no account named: the registration's"
    assert user_of(idp, token(two)) == "alice", "the msso command still gets the default"
    for asked in (two.msso("sign", "--url", URL, "--account", "default", binary=app),
                  subprocess.run([app, "token"], env=dict(two.env, MSSO_ACCOUNT="default"), capture_output=True, text=True)):
        assert asked.returncode == 7 and not asked.stdout, asked.stderr
        assert f'asked for the account default of "{GROUP}", but its registration (app "pinned-0"' in asked.stderr, asked.stderr
        assert "pins it to the account admin; ask for that one, or change its `account` there" in asked.stderr, asked.stderr


def test_msso_apps_allow_with_an_account_pins_the_app_to_it(two, idp, tmp_path):
    """`msso apps allow PATH --group G --account admin` writes the pin (the blind attack found the
    flag taken and dropped): the app then signs as bob naming no account, and is refused alice's."""
    app = tmp_path / "pinned-tool"
    shutil.copy(BIN / "msso", app)
    app.chmod(0o755)
    two.desktop.chown(tmp_path, recursive=True)
    allowed = two.msso("apps", "allow", str(app), "--group", GROUP, "--account", "admin")
    assert allowed.returncode == 0 and "as the account admin" in allowed.stdout, allowed.stdout + allowed.stderr
    shown = two.msso("apps")
    assert "account: admin" in shown.stdout, shown.stdout
    done = subprocess.run([*two.desktop.prefix, app, "token", "--resource", URL], env=two.env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert user_of(idp, done.stdout.strip()) == "bob"
    other = subprocess.run([*two.desktop.prefix, app, "token", "--account", "default", "--resource", URL], env=two.env,
                           capture_output=True, text=True, timeout=60)
    assert other.returncode == 7 and "pins it to the account admin" in other.stderr, other.stderr
