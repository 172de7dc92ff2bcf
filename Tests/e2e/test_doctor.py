"""`msso doctor` (issue 12): one test per check, each failing for the right reason, with what
the user sees: a ✓/✗ line per check, one sentence saying what to do, and the exit status of the
first failed check. Registration is optional setup (a warning, never a failure): registering a
tool gives any program of the user the group's token, so doctor says so and recommends
`resources` (problem 6)."""
import contextlib
import json
import sqlite3
import subprocess
import sys

import pytest

from harness import BIN, GROUP, ROOT, Broker, free_port, wait_for

PAM_MODULE = ROOT / "pam" / "pam_msso.so"


@pytest.fixture
def setup(desktop, tmp_path):
    """A PAM directory naming the built module, and the user units installed and enabled."""
    pam = tmp_path / "pam.d"
    pam.mkdir()
    (pam / "common-session").write_text(f"# a comment naming pam_msso.so does not count\n"
                                        f"session optional pam_unix.so\nsession optional {PAM_MODULE}\n")
    units = desktop.home / ".config" / "systemd" / "user"
    (units / "sockets.target.wants").mkdir(parents=True)
    for name in ("msso.socket", "msso.service"):
        (units / name).write_text((ROOT / "dist" / "systemd" / name).read_text())
    (units / "sockets.target.wants" / "msso.socket").symlink_to(units / "msso.socket")
    return pam


def doctor(broker, pam_dir, *argv, units=None):
    """`msso doctor` with its PAM directory and unit path (the test's, not this machine's)."""
    units = units or broker.desktop.home / ".config" / "systemd" / "user"
    env = dict(broker.env, MSSO_PAM_DIR=str(pam_dir), SYSTEMD_UNIT_PATH=str(units))
    return subprocess.run([*broker.desktop.prefix, BIN / "msso", "doctor", *argv], env=env,
                          capture_output=True, text=True, timeout=60)


def lines(done):
    return done.stdout.splitlines()


def marks(done):
    """Each check's mark, by check, from the JSON report."""
    return [(check["name"], check["status"]) for check in json.loads(done.stdout)["checks"]]


@pytest.fixture
def guarded(desktop, idp):
    """mssod whose group names its resources: registering msso for it passes."""
    daemon = Broker(desktop, idp, groups={GROUP: {"resources": ["https://api.example.com/"]}})
    yield daemon
    daemon.stop()


def test_all_checks_pass(guarded, setup):
    broker = guarded
    assert PAM_MODULE.exists(), "make -C pam first"
    done = doctor(broker, setup)
    assert done.returncode == 0, done.stdout + done.stderr
    out = lines(done)
    assert out[0] == f"✓ mssod answers on {broker.socket}"
    assert out[1] == ("✓ the Secret Service is there and its default keyring is unlocked; sessions are kept in the desktop keyring "
                      "(the Secret Service's default collection): `store = \"auto\"` and a Secret Service answers on the session bus, "
                      "its default keyring unlocked")
    assert out[2] == f"✓ the configuration parses: 1 access group ({GROUP})"
    assert out[3].startswith(f"✓ the identity provider of {GROUP} answers discovery at ") and out[3].endswith(" ms")
    assert out[4] == f"✓ {(BIN / 'msso').resolve()} is registered for {GROUP} (only for https://api.example.com/)"
    assert out[5] == "✓ msso is not locked"
    assert out[6] == f"✓ mssod writes its audit log ({broker.desktop.home}/.local/state/msso/audit.sqlite)"
    assert out[7] == f"✓ {setup}/common-session uses pam_msso.so ({PAM_MODULE})"
    assert out[8].startswith("✓ the systemd user units are installed (") and "msso.socket is enabled" in out[8]
    assert len(out) == 9

    report = json.loads(doctor(broker, setup, "--json").stdout)
    assert report["ok"] is True
    assert [c["name"] for c in report["checks"]] == ["broker", "keyring", "configuration", "discovery", "registration",
                                                      "lock", "audit", "pam", "units"]
    discovery = report["checks"][3]
    assert discovery["group"] == GROUP and 0 < discovery["seconds"] < 5


def test_optional_setup_absent_only_warns(broker, tmp_path):
    done = doctor(broker, tmp_path, units=tmp_path)
    assert done.returncode == 0, done.stdout
    assert lines(done)[-2] == (f"! no PAM service in {tmp_path} uses pam_msso.so, so logins do not show the SSO state; "
                               "optional: add `session optional pam_msso.so` (docs/GUIDE.md, At session start)")
    assert lines(done)[-1].startswith("! the systemd user units (msso.socket, msso.service) are not installed")


def test_broker_down(broker, setup):
    # (mssod reads the keyring at start before it heeds SIGTERM: let it finish that first.)
    assert broker.msso("status").returncode == 0
    broker.stop()
    done = doctor(broker, setup)
    assert done.returncode == 3, done.stdout
    out = lines(done)
    assert out[0].startswith(f"✗ mssod does not answer on {broker.socket} (")
    assert out[0].endswith("start it: `systemctl --user start msso.socket`, or run `mssod &`")
    assert out[1:7] == ["- not checked: mssod did not answer"] * 6
    assert out[7].startswith("✓ ") and out[8].startswith("✓ ")  # checked without the broker


def test_keyring_locked(broker, desktop, setup):
    desktop.lock_keyring()
    done = doctor(broker, setup)
    assert done.returncode == 4, done.stdout
    assert lines(done)[1].startswith("✗ the keyring is locked") and "unlock it" in lines(done)[1]
    assert marks(doctor(broker, setup, "--json"))[1] == ("keyring", "fail")


def test_keyring_absent(broker, desktop, setup):
    desktop.stop_keyring()
    done = doctor(broker, setup)
    assert done.returncode == 4, done.stdout
    assert lines(done)[1].startswith("✗ no Secret Service on this session bus")


def test_bad_config_line(broker, setup):
    text = broker.config.read_text()
    broker.config.write_text(text + "session_timeout = forever\n")
    bad_line = len(text.splitlines()) + 1
    done = doctor(broker, setup)
    assert done.returncode == 78, done.stdout
    line = lines(done)[2]
    assert line.startswith(f"✗ {broker.config}:{bad_line}: ")
    assert "fix it, then reload mssod" in line
    # mssod itself keeps serving what it read before.
    assert broker.msso("status").returncode == 0


def test_changed_config_is_a_warning(broker, setup):
    broker.config.write_text(broker.config.read_text().replace('"30m"', '"20m"'))
    done = doctor(broker, setup)
    assert done.returncode == 0, done.stdout
    assert lines(done)[2].startswith("! the configuration parses, but has changed since mssod read it; reload mssod")


def test_idp_down(desktop, idp, setup):
    port = free_port()  # nothing listens there
    daemon = Broker(desktop, idp, groups={GROUP: {}, "org.example.other": {"issuer": f"http://127.0.0.1:{port}/api/oidc"}})
    try:
        done = doctor(daemon, setup)
        assert done.returncode == 5, done.stdout
        out = lines(done)
        assert out[3].startswith(f"✓ the identity provider of {GROUP} answers discovery")
        assert out[4].startswith(f"✗ the identity provider of \"org.example.other\" (http://127.0.0.1:{port}/api/oidc) could not be reached")
        assert "(after " in out[4]
    finally:
        daemon.stop()


def test_msso_unregistered_is_a_warning_that_says_what_registering_gives_away(desktop, idp, setup):
    """Not registering msso is the safe default: a warning, exit status 0, and the sentence says
    what registering it would give away and what to set first."""
    daemon = Broker(desktop, idp, register=False)
    try:
        daemon.register("suite", [sys.executable], [GROUP])  # an app, but not msso
        done = doctor(daemon, setup)
        assert done.returncode == 0, done.stdout
        me = (BIN / "msso").resolve()
        line = lines(done)[4]
        assert line.startswith(f"! {me} is not registered for any access group, so `msso sign`, `msso token` and "
                               "`msso exec` are refused (everything else works); optional: "), line
        assert "any program of yours can then run it and get the group's token or signatures (within its `resources`)" in line
        assert "set `resources` for the group" in line and "`confirm = true`" in line
        assert line.endswith(f"then `msso apps allow {me} --group {GROUP}`, or ask your administrator (/etc/msso/apps.d)")
        assert marks(doctor(daemon, setup, "--json"))[4] == ("registration", "warn")
    finally:
        daemon.stop()


def test_msso_registered_for_a_group_without_resources_is_a_warning(broker, setup):
    done = doctor(broker, setup)
    assert done.returncode == 0, done.stdout
    line = lines(done)[4]
    assert line.startswith(f"! {(BIN / 'msso').resolve()} is registered for {GROUP}, which names no `resources`: "
                           "any program of yours can then run it and get the group's token or signatures, for any server; "
                           "set `resources` for the group"), line
    assert "`confirm = true`" in line


def test_locked(broker, setup):
    assert broker.msso("lock", "--passphrase-stdin", input="doctor's orders\n").returncode == 0
    done = doctor(broker, setup)
    assert done.returncode == 8, done.stdout
    assert lines(done)[5] == "✗ msso is locked, so nothing signs or gets a token; run `msso unlock`"
    assert broker.msso("unlock", "--passphrase-stdin", input="doctor's orders\n").returncode == 0


def test_an_audit_log_that_cannot_be_written_is_reported_and_reopened_without_a_restart(desktop, idp, setup):
    """An outside test: with the audit directory unwritable when mssod started, mssod served (as it
    should) but never recorded again once the directory was fixed, and doctor said nothing. A file
    in the directory's place (root, who runs the tests, is not stopped by permission bits)."""
    state = desktop.home / ".local" / "state"
    state.mkdir(parents=True, exist_ok=True)
    (state / "msso").write_text("not a directory\n")
    desktop.chown(desktop.home / ".local", recursive=True)
    daemon = Broker(desktop, idp, groups={GROUP: {"resources": ["https://api.example.com/"]}})
    database = state / "msso" / "audit.sqlite"
    try:
        pid = daemon.process.pid
        done = doctor(daemon, setup)
        assert done.returncode == 73, done.stdout
        line = lines(done)[6]
        assert line.startswith(f"✗ the audit log ({database}) is not being written: {state / 'msso'} is not a directory ("), line
        assert f"make {state / 'msso'} a directory you can write" in line and "with no restart" in line, line
        assert marks(doctor(daemon, setup, "--json"))[6] == ("audit", "fail")
        status = daemon.msso("status")
        assert status.returncode == 0 and f"The audit log ({database}) is not being written: " in status.stdout, status.stdout
        assert daemon.msso("audit").returncode != 0, "no rows to show, and it says why"
        assert f"no audit log: {state / 'msso'} is not a directory" in daemon.log.read_text()

        (state / "msso").unlink()  # the fix
        assert daemon.msso("check").returncode in (0, 1, 2)  # a call, whatever the session

        def verbs():
            try:
                with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
                    return {verb for (verb,) in db.execute("SELECT verb FROM audit")} or None
            except sqlite3.OperationalError:
                return None  # not there yet, or its table not yet made
        written = wait_for(verbs, timeout=30, what="mssod to open its audit log and write the call's row")
        assert "check" in written, written
        assert {"diagnose", "status", "audit"} <= written, f"the calls made while it could not be written were kept: {written}"
        assert daemon.process.pid == pid and daemon.process.poll() is None, "the same mssod"
        assert "audit log opened: rows are written again" in daemon.log.read_text()
        shown = daemon.msso("audit", "--json")
        assert shown.returncode == 0 and "check" in [row["verb"] for row in json.loads(shown.stdout)], shown.stderr
        done = doctor(daemon, setup)
        assert done.returncode == 0, done.stdout
        assert lines(done)[6] == f"✓ mssod writes its audit log ({database})"
        assert "audit log" not in daemon.msso("status").stdout
    finally:
        daemon.stop()


def test_pam_line_naming_a_missing_module(broker, setup):
    (setup / "sshd").write_text("session optional /nonexistent/pam_msso.so\n")
    (setup / "common-session").unlink()
    done = doctor(broker, setup)
    assert done.returncode == 78, done.stdout
    assert lines(done)[7].startswith(f"✗ {setup}/sshd uses /nonexistent/pam_msso.so, but it is not installed")


def test_diagnose_is_for_the_users_tools_only(broker):
    from harness import RawClient
    client = RawClient(broker.socket)
    reply = client.call("diagnose", {})
    assert reply["type"] == "error" and reply["error"] == "Forbidden"
    client.close()
