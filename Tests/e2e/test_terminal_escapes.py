"""Text from outside reaches the terminal without control characters (problem 8).

A hostile identity provider (fake_idp.py in front of glewlwyd) puts OSC and CSI sequences, C1
controls and a bidi override into what the commands quote: the discovery `issuer` (in errors),
the device login's `user_code` and addresses. The broker echoes a group name it does not know.
Every command (msso, its doctor, msso-logout, git-credential-msso, the kubectl plugin) must show
such text with its control characters replaced, and still say what went wrong; JSON output keeps
the value exact, escaped."""
import json
import signal
import subprocess

import pytest

from harness import BIN, GROUP, PASSWORDS
from test_hostile_idp import broker, fake  # noqa: F401 (fixtures: mssod behind the fault-injecting IdP)

# OSC (set the window title), CSI (clear the screen, colours), a C1 CSI, DEL and a bidi override.
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x1b[31mred\x1b[0m\x9b1m\x7f\u202egnp.exe"


def shown_safely(data: bytes) -> str:
    """The bytes a command wrote, checked: no C0 control but newline, no DEL, no C1 control, no
    bidi override. Returns them as text."""
    bad = [b for b in data if (b < 0x20 and b != 0x0A) or b == 0x7F]
    assert not bad, f"control bytes reached the output: {sorted(set(bad))!r} in {data!r}"
    text = data.decode("utf-8")
    assert not [c for c in text if 0x80 <= ord(c) <= 0x9F or 0x202A <= ord(c) <= 0x202E or 0x2066 <= ord(c) <= 0x2069], text
    return text


def run(broker, *argv, binary="msso", input=None, env=None):
    return subprocess.run([BIN / binary, *map(str, argv)], env=dict(broker.env, **(env or {})), input=input,
                          capture_output=True, timeout=60)



def test_a_hostile_issuer_in_an_error_is_shown_without_its_escapes(broker, fake, tmp_path):
    fake.discovery_issuer = f"{fake.origin}/{HOSTILE}"
    done = run(broker, "login", "--username", "alice", "--password-stdin", input=(PASSWORDS["alice"] + "\n").encode())
    assert done.returncode == 78, done  # an issuer not the configured one: the configuration's to fix
    err = shown_safely(done.stderr)
    assert "says its issuer is" in err and "not the configured one" in err, err
    assert "pwned" in err and "gnp.exe" in err, "the rest of the text is still shown"
    shown_safely(done.stdout)

    # --json: the message keeps the exact value, escaped, and stays valid JSON.
    as_json = run(broker, "login", "--json", "--username", "alice", "--password-stdin",
                  input=(PASSWORDS["alice"] + "\n").encode())
    assert as_json.returncode == 78
    message = json.loads(shown_safely(as_json.stdout))["message"]
    assert HOSTILE in message, message
    shown_safely(as_json.stderr)

    # doctor fetches discovery afresh and quotes the same sentence.
    env = {"MSSO_PAM_DIR": str(tmp_path), "SYSTEMD_UNIT_PATH": str(tmp_path)}
    doctor = run(broker, "doctor", env=env)
    assert doctor.returncode == 78, doctor  # the configured issuer is not the one the IdP names
    out = shown_safely(doctor.stdout)
    assert "says its issuer is" in out, out
    report = json.loads(shown_safely(run(broker, "doctor", "--json", env=env).stdout))
    assert any(HOSTILE in check["message"] for check in report["checks"]), report


def test_a_hostile_device_prompt_is_shown_without_its_escapes(broker, fake):
    fake.device_overrides = {"user_code": f"\x1b]8;;https://evil.example/\x07ABCD-{HOSTILE}\x1b]8;;\x07",
                             "verification_uri": f"{fake.origin}/device\x1b[1A\x1b[2K",
                             "verification_uri_complete": f"{fake.origin}/device?code=\x9b2J"}
    cli = subprocess.Popen([BIN / "msso", "login"], env=broker.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        prompt = cli.stderr.readline() + cli.stderr.readline()
        text = shown_safely(prompt)
        assert text.startswith("To log in, open ") and "enter the code" in text and "ABCD-" in text, text
        assert "(or open " in text, text
    finally:
        cli.send_signal(signal.SIGTERM)
        cli.communicate(timeout=10)


def test_every_command_shows_what_the_broker_echoes_without_escapes(broker):
    group = f"com.example.{HOSTILE}"
    for binary, argv in [("msso", ["status", "--group", group]),
                         ("msso", ["token", "--group", group]),  # the quick parser's path
                         ("msso", ["token", "--format", "kubernetes", "--group", group]),  # the kubectl plugin
                         ("msso", ["sign", "--group", group, "--url", "https://api.example.com/"]),
                         ("msso", ["exec", "--group", group, "--", "true"]),
                         ("msso-logout", ["--group", group])]:
        done = run(broker, *argv, binary=binary)
        assert done.returncode == 64, (argv, done)
        err = shown_safely(done.stderr)
        assert "no access group named" in err, (argv, err)
        shown_safely(done.stdout)

    helper = run(broker, "--group", group, "get", binary="git-credential-msso",
                 input=b"protocol=https\nhost=git.example.com\n\n")
    assert helper.returncode == 0
    assert "no access group named" in shown_safely(helper.stderr)
    assert helper.stdout == b"quit=1\n"
