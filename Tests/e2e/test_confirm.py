"""`confirm = true` on a registration (like `ssh-add -c`): each new program that asks a registered
tool for a token or a signature is shown to the user in a desktop notification, through a real
notification server (dunst on Xvfb), whose context menu (dunstctl context, its dmenu a picker
script) chooses Allow once, Allow for 1 hour or Deny. The tool is a registered copy of the
interpreter; the requester, another copy, runs it, as git runs git-credential-msso."""
import json
import shutil
import subprocess
import threading

import pytest

from harness import GROUP, Broker, wait_for
from test_notifications import Dunst
from test_trust import ENV, SIGN_ONCE, python_copy, remember_tokens

pytestmark = pytest.mark.skipif(not (shutil.which("dunst") and shutil.which("Xvfb")),
                                reason="needs dunst and xvfb (scripts/setup installs them)")

# The requester: runs the tool (argv[1]) with the sign script and prints what it printed.
REQUESTER = r'''
import subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
print(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "{}", flush=True)
'''


class Picker:
    """dunst's dmenu: a script that answers the context menu with the line for `choice`."""

    def __init__(self, directory):
        self.choice = directory / "choice"
        self.seen = directory / "menu"
        self.script = directory / "pick"
        self.script.write_text(f'#!/bin/sh\ntee "{self.seen}" | grep -m1 -F "#$(cat "{self.choice}")"\n')
        self.script.chmod(0o755)

    def choose(self, label, dunst):
        self.choice.write_text(label)
        assert dunst.ctl("context").returncode == 0


@pytest.fixture
def picker(desktop):
    return Picker(desktop.home)


@pytest.fixture
def dunst(desktop, picker):
    server = Dunst(desktop, dmenu=picker.script)
    yield server
    server.stop()


@pytest.fixture
def confirming(desktop, idp, tmp_path):
    """mssod with a tool registered for the group with `confirm = true`, logged in; the tool and
    a requester program to run it."""
    broker = Broker(desktop, idp, register=False)
    tool = python_copy(tmp_path, "sso-tool")
    requester = python_copy(tmp_path, "requester")
    (broker.admin_dir / "apps.d").mkdir(exist_ok=True)
    (broker.admin_dir / "apps.d" / "tool.toml").write_text(
        f'[apps.tool]\nexecutable = "{tool}"\ngroups = ["{GROUP}"]\nconfirm = true\n')
    assert broker.login().returncode == 0
    yield broker, tool, requester
    broker.stop()


def run_requester(broker, tool, requester):
    """Starts requester → tool → sign, in the background; returns a function that waits for the reply."""
    process = subprocess.Popen([str(requester), "-c", REQUESTER, str(tool), "-c", SIGN_ONCE, str(broker.socket), GROUP],
                               stdout=subprocess.PIPE, text=True, env=ENV)
    result = {}
    thread = threading.Thread(target=lambda: result.update(json.loads(process.stdout.read().strip() or "{}")))
    thread.start()

    def reply():
        thread.join(timeout=90)
        process.wait(timeout=10)
        remember_tokens(result)
        return result.get("reply", {})
    return reply


def questions(dunst):
    return [n for n in dunst.notifications() if n.get("summary", "").startswith("Allow ")]


def test_the_user_is_asked_and_deny_allow_once_and_allow_for_an_hour_do_what_they_say(confirming, dunst, picker):
    broker, tool, requester = confirming
    reply = run_requester(broker, tool, requester)
    asked = wait_for(lambda: questions(dunst)[-1:] or None, timeout=20, what="the confirmation")[0]
    assert asked["summary"] == f"Allow {requester} to use SSO for {GROUP}?"
    assert f"{requester} (run by " in asked["body"] and f"asks {tool} for a signature of {GROUP}" in asked["body"]
    assert {"Allow once", "Allow for 1 hour", "Deny"} <= set(asked["actions"])
    picker.choose("Deny", dunst)
    denied = reply()
    assert denied.get("type") == "error" and denied["error"] == "Forbidden", denied
    assert f"you did not allow {requester}" in denied["message"]

    reply = run_requester(broker, tool, requester)
    wait_for(lambda: len(questions(dunst)) == 2 or None, timeout=20, what="a second confirmation")
    picker.choose("Allow once", dunst)
    assert reply().get("type") == "reply", "allowed once"

    reply = run_requester(broker, tool, requester)
    wait_for(lambda: len(questions(dunst)) == 3 or None, timeout=20, what="once means once: asked again")
    picker.choose("Allow for 1 hour", dunst)
    assert reply().get("type") == "reply"
    assert run_requester(broker, tool, requester)().get("type") == "reply", "remembered for the hour"
    assert len(questions(dunst)) == 3, "not asked again within the hour"

    other = python_copy(tool.parent, "another-requester")
    reply = run_requester(broker, tool, other)
    wait_for(lambda: len(questions(dunst)) == 4 or None, timeout=20, what="another requester is asked about anew")
    picker.choose("Deny", dunst)
    assert reply().get("type") == "error"


# The registered tool: CONNECTIONS connections, each pipelining 32 signs of about 60 KB (headers),
# which wait for the user's answer; prints how many were answered Busy within a few seconds.
CALL_FLOODER = r'''
import json, socket, struct, sys, time
path, group, connections = sys.argv[1], sys.argv[2], int(sys.argv[3])
def frame(p): return struct.pack(">I", len(p)) + p
def read_frame(s):
    head = b""
    while len(head) < 4: head += s.recv(4 - len(head))
    body, size = b"", struct.unpack(">I", head)[0]
    while len(body) < size: body += s.recv(size - len(body))
    return json.loads(body)
pad = "x" * 60000
socks = []
for _ in range(connections):
    s = socket.socket(socket.AF_UNIX); s.connect(path)
    s.sendall(frame(json.dumps({"type": "call", "serial": 1, "method": "hello", "args": {"version": 1}}).encode()))
    read_frame(s)
    s.sendall(b"".join(frame(json.dumps({"type": "call", "serial": n, "method": "sign", "args": {
        "group": group, "method": "GET", "url": "https://api.example.com/x", "headers": [["X-Pad", pad]]}}).encode())
        for n in range(2, 34)))
    socks.append(s)
import select
busy, other = 0, []
# What is answered at once (the Busy ones) is read; the rest wait for the user: read until
# nothing more comes for half a second.
while True:
    ready, _, _ = select.select(socks, [], [], 0.5)
    if not ready: break
    for s in ready:
        reply = read_frame(s)
        if reply.get("error") == "Busy": busy += 1
        else: other.append(reply.get("error") or reply.get("type"))
print(json.dumps({"busy": busy, "other": other}), flush=True)
sys.stdin.readline()
'''


def test_calls_waiting_for_the_users_answer_hold_a_bounded_memory(confirming, dunst, picker):
    """Found by a blind attack: a registered tool with `confirm = true` (or a remote host through
    `msso ssh`) pipelined 32 signs of 60 KB on each of many connections; each waited for the
    user's answer holding its frame, ~65 KB apiece: 437 MB for 6,144 calls, about 2 GiB at the caps.
    Expected: what the calls running on the broker hold stays within a budget (16 MiB): past it a
    call is answered Busy at once; mssod's memory stays within start + 16 MiB + the connections'
    own; `msso status` answers meanwhile."""
    from harness import memory
    broker, tool, requester = confirming
    start = memory(broker.process.pid)
    flooder = subprocess.Popen([str(tool), "-c", CALL_FLOODER, str(broker.socket), GROUP, "16"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True, env=ENV)
    try:
        outcome = json.loads(flooder.stdout.readline())
        peak = memory(broker.process.pid)
        status = broker.msso("status")
        print(f"\n512 signs of 60 KB waiting for a confirmation: {outcome['busy']} answered Busy; mssod VmRSS "
              f"{start['VmRSS'] // 1024} MiB before, {peak['VmRSS'] // 1024} MiB with them waiting (bound: start + 32 MiB)")
        assert outcome["busy"] >= 200, outcome
        assert outcome["other"] == [], outcome
        assert peak["VmHWM"] < start["VmRSS"] + 32 * 1024, (start, peak)
        assert status.returncode == 0 and GROUP in status.stdout
    finally:
        flooder.kill()
        flooder.wait()


def test_a_confirming_registration_without_a_notification_server_refuses_and_says_why(confirming):
    broker, tool, requester = confirming
    refused = run_requester(broker, tool, requester)()
    assert refused.get("type") == "error" and refused["error"] == "Forbidden", refused
    assert "asks for your confirmation" in refused["message"] and "notification server" in refused["message"]


def test_msso_apps_allow_confirm_registers_a_tool_that_asks(desktop, idp, tmp_path):
    """`msso apps allow TOOL --group G --confirm` writes the user's registration with `confirm =
    true`; `msso apps show` says so; the tool then asks before handing out anything (here, with no
    notification server, it is refused and says why)."""
    broker = Broker(desktop, idp)
    try:
        assert broker.login().returncode == 0
        tool = python_copy(tmp_path, "my-tool")
        requester = python_copy(tmp_path, "my-requester")
        done = broker.msso("apps", "allow", str(tool), "--group", GROUP, "--confirm")
        assert done.returncode == 0, done.stderr
        assert "confirm = true" in (broker.user_dir / "apps.d" / "my-tool.toml").read_text()
        wait_for(lambda: "yes: each new requester" in broker.msso("apps", "show", "my-tool").stdout, what="the registration read")
        refused = run_requester(broker, tool, requester)()
        assert refused.get("error") == "Forbidden" and "asks for your confirmation" in refused["message"], refused
    finally:
        broker.stop()
