"""`msso doctor` (issue 12): one test per check, each failing for the right reason, with what
the user sees: a ✓/✗ line per check, one sentence saying what to do, and the exit status of the
first failed check. Registration is optional setup (a warning, never a failure): registering a
tool gives any program of the user the group's token, so doctor says so and recommends
`resources` (problem 6)."""
import json
import subprocess
import sys

import pytest

from harness import BIN, GROUP, ROOT, Broker, free_port

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
    assert out[6] == f"✓ {setup}/common-session uses pam_msso.so ({PAM_MODULE})"
    assert out[7].startswith("✓ the systemd user units are installed (") and "msso.socket is enabled" in out[7]
    assert len(out) == 8

    report = json.loads(doctor(broker, setup, "--json").stdout)
    assert report["ok"] is True
    assert [c["name"] for c in report["checks"]] == ["broker", "keyring", "configuration", "discovery", "registration",
                                                      "lock", "pam", "units"]
    discovery = report["checks"][3]
    assert discovery["group"] == GROUP and 0 < discovery["seconds"] < 5


def test_optional_setup_absent_only_warns(broker, tmp_path):
    done = doctor(broker, tmp_path, units=tmp_path)
    assert done.returncode == 0, done.stdout
    assert lines(done)[-2] == (f"! no PAM service in {tmp_path} uses pam_msso.so, so logins do not show the SSO state; "
                               "optional: add `session optional pam_msso.so` (README, At session start)")
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
    assert out[1:6] == ["- not checked: mssod did not answer"] * 5
    assert out[6].startswith("✓ ") and out[7].startswith("✓ ")  # checked without the broker


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


def test_pam_line_naming_a_missing_module(broker, setup):
    (setup / "sshd").write_text("session optional /nonexistent/pam_msso.so\n")
    (setup / "common-session").unlink()
    done = doctor(broker, setup)
    assert done.returncode == 78, done.stdout
    assert lines(done)[6].startswith(f"✗ {setup}/sshd uses /nonexistent/pam_msso.so, but it is not installed")


def test_diagnose_is_for_the_users_tools_only(broker):
    from harness import RawClient
    client = RawClient(broker.socket)
    reply = client.call("diagnose", {})
    assert reply["type"] == "error" and reply["error"] == "Forbidden"
    client.close()
