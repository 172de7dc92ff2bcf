"""Access groups that mean something: the caller's executable from the kernel, registrations in
apps.d (admin over user), an audit row per verb, live events to every subscriber."""
import hashlib
import json
import selectors
import shutil
import sqlite3
import threading
import time

from pathlib import Path

import pytest

from harness import BIN, GROUP, PYTHON, SECRETS, Broker, RawClient, answers, wait_for

URL = "https://api.example.com/items"


@pytest.fixture
def bare(desktop, idp):
    """A broker with nothing registered: only the user's own tools manage it."""
    daemon = Broker(desktop, idp, groups={GROUP: {}, "com.example.other": {}}, register=False)
    assert daemon.login(group=GROUP).returncode == 0, "the msso CLI manages every group"
    yield daemon
    daemon.stop()


def copy_of_msso(tmp_path, name="app"):
    """The msso binary at another path: a different app as far as the kernel is concerned."""
    target = tmp_path / name
    shutil.copy2(BIN / "msso", target)
    return target


def sign_as(broker, executable, group=GROUP):
    return broker.msso("sign", "--group", group, "--url", URL, binary=executable)


def test_an_unregistered_app_is_refused_and_a_registered_one_served(bare):
    refused = bare.msso("sign", "--group", GROUP, "--url", URL)
    assert refused.returncode == 7
    me = (BIN / "msso").resolve()
    assert f"{me} is not registered for access group \"{GROUP}\"" in refused.stderr
    assert f"msso apps allow {me} --group {GROUP}" in refused.stderr, "the sentence names the fix"
    bare.register("cli", [BIN / "msso"], [GROUP])
    assert bare.msso("sign", "--group", GROUP, "--url", URL).returncode == 0, "picked up at the next connection"
    other = bare.msso("sign", "--group", "com.example.other", "--url", URL)
    assert other.returncode == 7, "registered for one group is not registered for another"


def test_a_registration_written_while_mssod_starts_is_in_force(desktop, idp):
    """mssod reads apps.d before it watches it; a file written in between must be in force once
    the socket answers, not lost until a SIGHUP. strace holds mssod 3 s at the entry of the
    watch's inotify_init1, after its first read: the file is written then."""
    daemon = Broker(desktop, idp, register=False, start=False,
                    launcher=["strace", "-D", "-f", "-qq", "--seccomp-bpf", "-o", "/dev/null", "-e", "trace=inotify_init1",
                              "-e", "inject=inotify_init1:delay_enter=3000000:when=1"])

    def held():
        """Whether a thread of mssod is held at the entry of inotify_init1 (x86-64 system call 294)."""
        tasks = Path(f"/proc/{daemon.process.pid}/task")
        for task in tasks.iterdir() if tasks.exists() else ():
            try:
                if (task / "syscall").read_text().split(" ", 1)[0] == "294":
                    return True
            except OSError:
                pass
        return False

    try:
        daemon.start(wait=False)
        wait_for(held, what="mssod held at its inotify_init1")
        daemon.register("cli", [BIN / "msso"], [GROUP])
        assert held() and not answers(daemon.socket), "the file landed after the first read, before the watch"
        wait_for(lambda: answers(daemon.socket), what="mssod's socket")
        assert daemon.login().returncode == 0
        done = daemon.msso("sign", "--group", GROUP, "--url", URL)
        assert done.returncode == 0, done.stderr
    finally:
        daemon.stop()


def test_the_same_binary_at_another_path_is_refused(bare, tmp_path):
    bare.register("cli", [BIN / "msso"], [GROUP])
    copy = copy_of_msso(tmp_path)
    done = sign_as(bare, copy)
    assert done.returncode == 7 and f"{copy} is not registered" in done.stderr


def test_a_pinned_digest_that_no_longer_matches_is_refused(bare, tmp_path):
    app = copy_of_msso(tmp_path)
    bare.register("pinned", [app], [GROUP], sha256=hashlib.sha256(app.read_bytes()).hexdigest())
    assert sign_as(bare, app).returncode == 0
    with open(app, "ab") as binary:  # still runs; no longer the binary the admin pinned
        binary.write(b"\0")
    done = sign_as(bare, app)
    assert done.returncode == 7 and "is not the binary registered" in done.stderr
    assert hashlib.sha256(app.read_bytes()).hexdigest() in done.stderr, "the sentence shows what runs, beside the pin"


def test_the_admins_registration_wins_over_the_users(bare):
    bare.register("tool", [BIN / "msso"], [GROUP], admin=True)
    bare.register("tool", [BIN / "msso"], ["com.example.other"], admin=False)  # same name: ignored
    assert bare.msso("sign", "--group", GROUP, "--url", URL).returncode == 0
    assert bare.msso("sign", "--group", "com.example.other", "--url", URL).returncode == 7
    apps = json.loads(bare.msso("apps", "--json").stdout)
    assert [app["name"] for app in apps["ignored"]] == ["tool-0"]
    assert all(app["admin"] for app in apps["registrations"])


def test_the_admin_can_turn_user_registrations_off(desktop, idp):
    daemon = Broker(desktop, idp, register=False, start=False)
    daemon.config.write_text(daemon.config.read_text() + "\n[policy]\nuser_apps = false\n")
    daemon.start()
    try:
        daemon.login()
        daemon.register("mine", [BIN / "msso"], [GROUP], admin=False)
        refused = daemon.msso("sign", "--url", URL)
        # The fix it names is the administrator's: `msso apps allow` would do nothing here.
        assert refused.returncode == 7 and "only your administrator can register it" in refused.stderr, refused.stderr
        assert "msso apps allow" not in refused.stderr
        allow = daemon.msso("apps", "allow", BIN / "msso", "--group", GROUP)
        assert allow.returncode == 7 and "does not allow user app registrations" in allow.stderr
    finally:
        daemon.stop()


def test_msso_apps_allow_show_and_revoke(bare):
    allow = bare.msso("apps", "allow", BIN / "msso", "--group", GROUP, "--name", "cli")
    assert allow.returncode == 0 and allow.stdout.strip() == f"cli may now use {GROUP}."
    assert bare.msso("sign", "--group", GROUP, "--url", URL).returncode == 0
    shown = bare.msso("apps", "show", "cli")
    assert f"executable: {(BIN / 'msso').resolve()}" in shown.stdout and "(user)" in shown.stdout
    listed = bare.msso("apps").stdout
    assert "cli" in listed and "[user]" in listed
    revoke = bare.msso("apps", "revoke", "cli")
    assert revoke.returncode == 0 and "no longer registered" in revoke.stdout
    assert bare.msso("sign", "--group", GROUP, "--url", URL).returncode == 7


def test_msso_apps_changes_only_the_registrations_it_wrote(bare):
    """Found by an outside test: `msso apps revoke` of an app the user had registered in a file of
    their own failed with the file system's words; a revoke of one group would have written a file
    of its own beside it and said "may now use" while the user's file still gave every group."""
    bare.register("suite", [BIN / "msso"], [GROUP, "com.example.other"], admin=False)
    written = (bare.user_dir / "apps.d" / "suite.toml").read_text()
    wait_for(lambda: "suite-0" in bare.msso("apps").stdout, what="the registration to be read")
    for argv in (["apps", "revoke", "suite-0"], ["apps", "revoke", "suite-0", "--group", GROUP],
                 ["apps", "allow", BIN / "msso", "--group", GROUP, "--name", "suite-0", "--confirm"]):
        done = bare.msso(*argv)
        assert done.returncode != 0 and done.stdout == "", (argv, done.stdout)
        assert "a file `msso apps` did not write" in done.stderr and str(bare.user_dir / "apps.d" / "suite.toml") in done.stderr, done.stderr
        assert "edit its table there" in done.stderr and "Error Domain" not in done.stderr, done.stderr
    assert sorted((bare.user_dir / "apps.d").iterdir()) == [bare.user_dir / "apps.d" / "suite.toml"], "nothing written beside it"
    assert (bare.user_dir / "apps.d" / "suite.toml").read_text() == written
    assert bare.msso("sign", "--group", GROUP, "--url", URL).returncode == 0, "the registration stands, as the refusal says"


def test_an_app_sees_only_its_groups(bare):
    bare.register("python", [PYTHON], [GROUP])
    client = RawClient(bare.socket)
    try:
        status = client.call("status", {})
        assert [g["group"] for g in status["result"]["groups"]] == [GROUP]
        other = client.call("check", {"group": "com.example.other"})
        assert other["error"] == "NotEntitled"
        assert client.call("sign", {"method": "GET", "url": URL})["type"] == "reply", "its only group is the default"
        assert client.call("apps", {})["error"] == "Forbidden", "only the msso command lists registrations"
        hello = RawClient(bare.socket, hello=False).call("hello", {"version": 1})
        assert hello["result"]["peer"]["executable"] == str(PYTHON), "the kernel's view of the caller"
    finally:
        client.close()


def test_every_verb_is_audited_without_a_secret(bare, desktop, tmp_path):
    bare.register("cli", [BIN / "msso"], [GROUP])
    signed = bare.msso("sign", "--group", GROUP, "--url", URL)
    assert signed.returncode == 0
    outsider = copy_of_msso(tmp_path, "outsider")
    assert sign_as(bare, outsider).returncode == 7
    for argv in (["extend", "--group", GROUP], ["status"], ["check", "--group", GROUP], ["logout", "--group", GROUP]):
        bare.msso(*argv)
    rows = json.loads(bare.msso("audit", "--json").stdout)
    seen = [(row["verb"], row["outcome"], row.get("error")) for row in rows]
    for expected in [("login", "ok", None), ("sign", "ok", None), ("sign", "error", "NotEntitled"), ("extend", "ok", None),
                     ("status", "ok", None), ("check", "ok", None), ("logout", "ok", None)]:
        assert expected in seen, (expected, seen)
    refused = next(row for row in rows if row.get("error") == "NotEntitled")
    assert refused["executable"] == str(outsider) and refused["group"] == GROUP and refused["pid"] > 0
    assert next(row for row in rows if row["verb"] == "sign" and row["outcome"] == "ok")["app"] == "cli-0"
    human = bare.msso("audit", "--group", GROUP, "--since", "1h").stdout
    assert "sign  com.example.suite  NotEntitled" in human

    database = desktop.home / ".local" / "state" / "msso" / "audit.sqlite"
    assert oct(database.stat().st_mode & 0o777) == "0o600"
    def written():  # rows are written in batches every 100 ms
        db = sqlite3.connect(database)
        try:
            return db.execute("SELECT count(*), (SELECT verb FROM audit ORDER BY id DESC LIMIT 1) FROM audit").fetchone()
        except sqlite3.OperationalError:  # busy: the daemon is writing a batch
            return 0, None
        finally:
            db.close()
    total, last = wait_for(lambda: (row := written())[0] >= len(rows) + 2 and row, interval=0.05,
                           what="the audit queries' rows")
    assert (total, last) == (len(rows) + 2, "audit"), "both audit queries are audited too"
    token = signed.stdout.split(" ", 2)[2].strip()
    SECRETS.add(token)
    raw = b"".join(path.read_bytes() for path in database.parent.iterdir())
    for secret in [token, "alice-pass"]:
        assert secret.encode() not in raw, "no secret in the audit database"


def subscribe(path, group):
    client = RawClient(path)
    assert client.call("subscribe", {"groups": [group]})["type"] == "reply"
    return client


def test_a_hundred_subscribers_hear_the_logout_and_a_stalled_one_slows_nobody(desktop, idp):
    broker = Broker(desktop, idp)
    try:
        broker.login()
        # A subscriber that stops reading: it pipelines big pings and never reads the replies. The
        # daemon stops reading it once its unread replies pass the high-water mark, so its writes
        # block: they run on a thread of their own.
        stalled = subscribe(broker.socket, GROUP)

        def pipeline():
            try:
                for serial in range(100, 112):
                    stalled.send({"type": "call", "serial": serial, "method": "ping", "args": {"data": "x" * 60000}})
            except OSError:
                pass  # hung up on, as it should be
        writer = threading.Thread(target=pipeline, daemon=True)
        writer.start()
        time.sleep(0.3)  # the daemon stops reading the stalled one: nothing outside marks the moment
        subscribers = [subscribe(broker.socket, GROUP) for _ in range(100)]
        selector = selectors.DefaultSelector()
        for client in subscribers:
            client.sock.setblocking(True)
            selector.register(client.sock, selectors.EVENT_READ, client)

        started = time.monotonic()
        assert broker.msso("logout").returncode == 0
        returned = time.monotonic()
        heard = {}
        while len(heard) < 100 and time.monotonic() - started < 5:
            for key, _ in selector.select(timeout=1):
                message = key.data.receive()
                if message and message.get("signal") == "LoggedOut":
                    heard[key.data] = time.monotonic()
                    selector.unregister(key.fileobj)
        assert len(heard) == 100, f"{len(heard)} of 100 subscribers heard LoggedOut"
        latest = max(heard.values()) - returned
        print(f"100 subscribers: the last heard LoggedOut {latest * 1000:.1f} ms after logout returned")
        assert latest < 0.1
        assert broker.alive() and broker.msso("check").returncode == 2
        # Past the high-water mark the daemon hung up on the stalled one instead of buffering on.
        stalled.sock.settimeout(5)
        drained = 0
        try:
            while chunk := stalled.sock.recv(1 << 16):
                drained += len(chunk)
        except ConnectionResetError:
            pass
        assert drained < 12 * 60000, "it was disconnected before every reply was buffered for it"
        writer.join(timeout=5)
    finally:
        broker.stop()


def test_expiring_then_expired_are_pushed_on_time(desktop, idp):
    broker = Broker(desktop, idp, groups={GROUP: {"session_timeout": "3s", "expiring_lead": "2s"}})
    try:
        client = subscribe(broker.socket, GROUP)
        client.sock.settimeout(6)
        logged_in = time.monotonic()
        broker.login()
        events = []
        while len(events) < 3:
            message = client.receive()
            events.append((message["signal"], time.monotonic() - logged_in))
        assert [name for name, _ in events] == ["LoggedIn", "Expiring", "Expired"]
        assert 0.7 < events[1][1] < 1.6 and 2.8 < events[2][1] < 3.6, events
    finally:
        broker.stop()
