"""Desktop notifications from mssod (issue 12), shown by a real notification server (dunst, on
Xvfb) on the test's private session bus. What the server was asked to show is read with
dbus-monitor; what it shows and does with dunstctl."""
import itertools
import json
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from harness import GROUP, Broker, wait_for

pytestmark = pytest.mark.skipif(not (shutil.which("dunst") and shutil.which("Xvfb")),
                                reason="needs dunst and xvfb (scripts/setup installs them)")

DUNSTRC = """[global]
    timeout = 0
[urgency_normal]
    timeout = 0
"""


class Dunst:
    """Xvfb and dunst on the desktop's session bus, and a dbus-monitor of the Notifications calls."""

    def __init__(self, desktop, dmenu=None):
        """`dmenu`: the program dunst runs for its context menu (`dunstctl context`)."""
        self.desktop = desktop
        self.display = next(n for n in itertools.count(90) if not Path(f"/tmp/.X11-unix/X{n}").exists()
                            and not Path(f"/tmp/.X{n}-lock").exists())
        self.xvfb = subprocess.Popen(["Xvfb", f":{self.display}", "-screen", "0", "800x600x24", "-nolisten", "tcp"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: Path(f"/tmp/.X11-unix/X{self.display}").exists(), what="Xvfb")
        config = desktop.home / "dunstrc"
        config.write_text(DUNSTRC.replace("[global]", f'[global]\n    dmenu = "{dmenu}"') if dmenu else DUNSTRC)
        self.log = desktop.home / "monitor.log"
        self.monitor = subprocess.Popen(["dbus-monitor", "--session", "interface='org.freedesktop.Notifications'"],
                                        env=desktop.env, stdout=open(self.log, "w"), stderr=subprocess.DEVNULL)
        self.dunst = subprocess.Popen(["dunst", "-config", str(config)], env=dict(desktop.env, DISPLAY=f":{self.display}"),
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: "true" in desktop.run(["gdbus", "call", "--session", "--dest", "org.freedesktop.DBus",
                                                "--object-path", "/org/freedesktop/DBus", "--method",
                                                "org.freedesktop.DBus.NameHasOwner",
                                                "org.freedesktop.Notifications"]).stdout, what="dunst on the bus")

    def ctl(self, *argv):
        return self.desktop.run(["dunstctl", *argv])

    def displayed(self):
        return int(self.ctl("count", "displayed").stdout.strip())

    def notifications(self):
        """Every Notify call seen: {replaces, summary, body, actions}, in order."""
        calls, current, fields = [], None, []
        for line in self.log.read_text().splitlines():
            if "member=Notify" in line:
                current, fields = {}, []
                calls.append(current)
            elif current is not None:
                if line.startswith("method ") or line.startswith("signal "):
                    current = None
                    continue
                match = re.match(r'\s+(string|uint32|int32) "?(.*?)"?$', line)
                if match:
                    fields.append(match.group(2))
                if len(fields) >= 5 and "summary" not in current:
                    current.update(replaces=int(fields[1]), summary=fields[3], body=fields[4])
                if "summary" in current:
                    current["actions"] = fields[5:-1]
        return calls

    def stop(self):
        for process in (self.dunst, self.monitor, self.xvfb):
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()


@pytest.fixture
def dunst(desktop):
    server = Dunst(desktop)
    yield server
    server.stop()


def wait_for_notification(dunst, summary, timeout=20):
    return wait_for(lambda: next((n for n in dunst.notifications() if n.get("summary") == summary), None),
                    timeout=timeout, what=f"a notification {summary!r}")


def first_login(broker, dunst):
    """The group's first login, and its notice ("now logged in as alice", which stays until
    closed: test_accounts.py) closed, so that what follows is the only notification shown."""
    assert broker.login().returncode == 0
    wait_for_notification(dunst, f"SSO for {GROUP}: now logged in as alice")
    wait_for(lambda: dunst.displayed() == 1, what="the notice shown")
    assert dunst.ctl("close").returncode == 0
    wait_for(lambda: dunst.displayed() == 0, what="the notice closed")


def test_expiring_offers_extend_and_the_action_extends(desktop, idp, dunst):
    broker = Broker(desktop, idp, groups={GROUP: {"session_timeout": "8s", "session_max": "1h", "expiring_lead": "6s"}})
    try:
        first_login(broker, dunst)
        before = broker.status_json()["sessionExpiresAt"]
        shown = wait_for_notification(dunst, f"SSO for {GROUP} ends in 1 min", timeout=10)
        assert shown["body"] == "Extend it to keep your apps signed in."
        assert "Extend" in shown["actions"] and "default" in shown["actions"]
        assert dunst.displayed() == 1

        assert dunst.ctl("action", "0").returncode == 0  # as a click on the notification
        after = wait_for(lambda: (lambda end: end if end > before + 0.5 else None)(broker.status_json()["sessionExpiresAt"]),
                         timeout=10, what="the session extended")
        assert after > before
        wait_for(lambda: dunst.displayed() == 0, what="the notification closed after the extend")
        assert "extended from a notification" in broker.log.read_text()
    finally:
        broker.stop()


def test_expired_replaces_expiring_and_log_in_starts_a_device_login(desktop, idp, dunst):
    broker = Broker(desktop, idp, groups={GROUP: {"session_timeout": "4s", "session_max": "1h", "expiring_lead": "2s"}})
    try:
        first_login(broker, dunst)
        expiring = wait_for_notification(dunst, f"SSO for {GROUP} ends in 1 min")
        expired = wait_for_notification(dunst, "Log in again")
        assert expired["body"] == f"Your SSO session for {GROUP} has ended."
        assert "Log in" in expired["actions"]
        ids = re.findall(r"uint32 (\d+)", dunst.log.read_text())
        assert expired["replaces"] != 0 and str(expired["replaces"]) in ids, "replaced, not stacked"
        assert expiring["replaces"] == 0
        assert dunst.displayed() == 1

        assert dunst.ctl("action", "0").returncode == 0
        prompt = wait_for_notification(dunst, f"Log in to SSO for {GROUP}")
        code = re.search(r"enter the code (\S+)\.$", prompt["body"]).group(1)
        assert dunst.displayed() == 1
        idp.approve_device(code)
        wait_for(lambda: broker.msso("check").returncode == 0, timeout=30, what="the login from the notification")
        wait_for(lambda: dunst.displayed() == 0, what="the prompt closed after the login")
        for note in dunst.notifications():  # never a token in what was shown
            assert len(note["body"]) < 200
    finally:
        broker.stop()


def test_a_group_a_reload_adds_gets_its_notifications(desktop, idp, dunst):
    broker = Broker(desktop, idp)
    added = "com.example.added"
    try:
        broker.write_config({GROUP: {}, added: {"session_timeout": "8s", "session_max": "1h", "expiring_lead": "6s"}}, idp)
        broker.process.send_signal(signal.SIGHUP)
        wait_for(lambda: "configuration reloaded" in broker.log.read_text(), what="the reload")
        assert broker.login(group=added).returncode == 0
        shown = wait_for_notification(dunst, f"SSO for {added} ends in 1 min", timeout=10)
        assert "Extend" in shown["actions"]
    finally:
        broker.stop()


def test_without_a_notification_server_nothing_fails(desktop, idp):
    broker = Broker(desktop, idp, groups={GROUP: {"session_timeout": "3s", "session_max": "1h", "expiring_lead": "2s"}})
    try:
        assert broker.login().returncode == 0
        wait_for(lambda: broker.msso("check").returncode == 1, timeout=15, what="the session to expire")  # and said so
        assert broker.alive()
        wait_for(lambda: "no notification server answered" in broker.log.read_text(), what="the Expired notification tried")
        assert broker.login().returncode == 0
    finally:
        broker.stop()


def test_an_accounts_notifications_name_it_and_their_extend_extends_that_account(desktop, idp, dunst):
    """A session of the account admin: its notices say so ("SSO for G (account admin) …"), and
    the Extend of its expiring notice slides admin's window, not the group's default's."""
    import json
    broker = Broker(desktop, idp, groups={GROUP: {"session_timeout": "8s", "session_max": "1h", "expiring_lead": "6s"}})
    try:
        assert broker.login("bob", account="admin").returncode == 0
        wait_for_notification(dunst, f"SSO for {GROUP} (account admin): now logged in as bob")
        wait_for(lambda: dunst.displayed() == 1, what="the notice shown")
        assert dunst.ctl("close").returncode == 0
        wait_for(lambda: dunst.displayed() == 0, what="the notice closed")

        def admins_end():
            return json.loads(broker.msso("check", "--json", "--account", "admin").stdout)["sessionExpiresAt"]
        before = admins_end()
        shown = wait_for_notification(dunst, f"SSO for {GROUP} (account admin) ends in 1 min", timeout=10)
        assert "Extend" in shown["actions"]
        assert dunst.ctl("action", "0").returncode == 0
        wait_for(lambda: admins_end() > before + 0.5, timeout=10, what="the admin account's window slid")
    finally:
        broker.stop()
