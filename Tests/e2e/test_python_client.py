"""examples/python/msso_client.py: a small command-line tool on the Python library, against the
real daemon. (The library itself, which grew from the client written from docs/PROTOCOL.md alone
that this file used to test, is tested by test_python_library.py.)"""
import json
import subprocess
import sys

from harness import GROUP, PASSWORDS, ROOT, SECRETS

SCRIPT = ROOT / "examples" / "python" / "msso_client.py"


def test_the_script_is_a_small_cli(broker):
    def script(*argv, input=None):
        return subprocess.run([sys.executable, SCRIPT, *argv], env=broker.env, input=input, capture_output=True,
                              text=True, timeout=30)

    assert script("check").returncode == 2
    watch = subprocess.Popen([sys.executable, SCRIPT, "watch"], env=broker.env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert "Watching" in watch.stderr.readline()
        login = script("login", "alice", input=PASSWORDS["alice"] + "\n")
        assert login.returncode == 0, login.stderr
        assert f"{GROUP}: logged in as alice" in login.stdout
        assert watch.stdout.readline().startswith(f"LoggedIn: {GROUP}: logged in as alice")
    finally:
        watch.terminate()
        watch.wait(timeout=5)

    status = json.loads(script("status", "--json").stdout)
    assert status["groups"][0]["state"] == "valid"
    assert script("check").returncode == 0
    signed = script("sign", "https://api.example.com/", "--method", "POST", "--header", "Accept: */*")
    assert signed.returncode == 0, signed.stderr
    name, value = signed.stdout.strip().split(": ", 1)
    assert name == "Authorization" and value.startswith("Bearer ")
    SECRETS.add(value.split(" ", 1)[1])
    assert script("logout").stdout.strip() == f"Logged out of {GROUP}."
    failed = script("sign", "https://api.example.com/")
    assert failed.returncode == 2 and "NotLoggedIn" in failed.stderr, "exits as `msso sign` would"
    assert broker.msso("sign", "--url", "https://api.example.com/").returncode == 2
