"""The README's demo, run as a test: what each app prints at each step of the mobile-SSO scenario."""
import os
import re
import subprocess

from harness import BIN, LOGS, ROOT


def test_the_demo_scenario(tmp_path):
    log = tmp_path / "mssod.log"
    LOGS.append(log)
    done = subprocess.run([ROOT / "examples" / "demo.sh"], env=dict(os.environ, DEMO_SESSION_TIMEOUT="3", MSSO_BIN=str(BIN),
                                                                    DEMO_MSSOD_LOG=str(log)),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    steps = re.split(r"\n.*== \d\. ", done.stdout)
    assert len(steps) == 6, done.stdout
    one, two, three, four, five = steps[1:]

    # 1. App1 finds no credentials and logs in; both running apps see the session start.
    assert "[App1] no credentials: logging in" in one
    assert "[App1] logged in as alice; session expires at" in one
    assert "[App2] sees a new session (alice" in one

    # 2. App2 uses App1's login without logging in, and the API accepts its signed request.
    assert "[App2] found the suite's session (alice" in two and "no login needed" in two
    assert "[App2] GET /inbox -> 200" in two
    assert "msso: " in two and "is not registered for access group \"com.example.suite\"" in two, "outsiders are refused"

    # 3. App2 logs out and in again; App1 sees both and its next request works with the new session.
    assert three.index("[App1] was logged out") < three.index("[App1] sees a new session")
    assert "[App2] logged in as alice" in three
    assert "[App1] GET /inbox -> 200" in three

    # 4. The idle window passes: both apps are told, and App1's request is refused.
    assert "[App1] the session expired: asking the user to log in" in four
    assert "[App2] the session expired" in four
    assert "has expired; run `msso login" in four and "[Expired]" in four

    # 5. App1 logs in again; the Logout app ends it; App2 is told and must authenticate.
    assert "[App1] the session has expired: logging in" in five
    assert "[Logout] ended the SSO session of com.example.suite" in five
    assert "[App2] was logged out" in five
    assert "[App2] not logged in" in five and "[NotLoggedIn]" in five
    assert "com.example.suite: not logged in" in five
