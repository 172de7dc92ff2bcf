"""The session window when the wall clock jumps (an outside tester's finding): the window is stored
as wall-clock times, and mssod's timers must follow that clock, yet never let a session outlive its
window in elapsed time (ARCHITECTURE.md, "The window is on two clocks").

mssod runs under libfaketime (Debian's `faketime`, from scripts/setup), which moves its wall clock
alone: an offset in a file it reads at every call, the monotonic and boot clocks left real
(FAKETIME_DONT_FAKE_MONOTONIC). A faked jump is not a real one: the kernel, whose timers mssod
waits on, knows nothing of it. A real jump also makes the kernel announce a clock set (it wakes
every timerfd armed with TFD_TIMER_CANCEL_ON_SET), so each jump here is both: the offset moved,
then a clock_settime(CLOCK_REALTIME) of the time the clock reads (root; it steps the real clock
back by the microsecond or so between the two calls, which nothing notices).

What libfaketime 0.9.10 does to timers, so that the tests are not fooled: it converts every
absolute timerfd time from the faked clock to the real one with the offset of that moment, as if
every clock were the wall clock. Right for mssod's CLOCK_REALTIME timer, but the kernel keeps what
was armed before a jump: the clock-set event is what makes mssod read its (faked) clock at once,
as the kernel firing its absolute timer would after a real jump. A CLOCK_BOOTTIME timer armed
absolute would be moved by the offset too (after the jump back, 5 minutes late), so mssod arms
that one relative, the same deadline, which libfaketime passes through. Dispatch's own
timerfds (Swift's Task.sleep, which the expiry timers used before) are converted too: after a jump
forward they spin, after a jump back they wait as much longer, but Dispatch checks its own real
clock before firing anything, so nothing fires early. A suspend cannot be made here."""
import base64
import json
import os
import time
from pathlib import Path

import pytest

from harness import GROUP, Broker, RawClient, sleep_until

FAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")

pytestmark = pytest.mark.skipif(not FAKETIME.exists() or os.geteuid() != 0,
                                reason="needs libfaketime (scripts/setup installs faketime) and root, to announce a clock set")


class WallClock:
    """mssod's wall clock: the real one plus an offset libfaketime reads from a file at every call."""

    def __init__(self, desktop):
        self.file = desktop.home / "faketime"
        self.set_offset(0)
        desktop.chown(self.file)

    @property
    def environment(self):
        return {"LD_PRELOAD": str(FAKETIME), "FAKETIME_TIMESTAMP_FILE": str(self.file),
                "FAKETIME_NO_CACHE": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}

    def set_offset(self, seconds):
        scratch = self.file.with_suffix(".new")
        scratch.write_text(f"{seconds:+d}\n")
        os.replace(scratch, self.file)  # whole: libfaketime never reads half a file

    def jump(self, seconds):
        """Moves mssod's wall clock to `seconds` from the real one, as a real jump does: the time it
        reads, and the kernel's word that the clock was set."""
        self.set_offset(seconds)
        time.clock_settime_ns(time.CLOCK_REALTIME, time.clock_gettime_ns(time.CLOCK_REALTIME))


def subscriber(broker):
    client = RawClient(broker.socket)
    assert client.call("subscribe", {"groups": [GROUP]})["type"] == "reply"
    return client


def next_signal(client, timeout):
    """The next signal's name and when it came (time.monotonic()); fails after `timeout` s."""
    client.sock.settimeout(timeout)
    message = client.receive()
    assert message is not None and message["type"] == "signal", message
    return message["signal"], time.monotonic()


def expired_everywhere(broker):
    """check, status and sign (the fast path's and the actor's) all say the session expired."""
    check = broker.msso("check", "--json")
    assert check.returncode == 1 and json.loads(check.stdout)["state"] == "expired", check
    assert json.loads(broker.msso("status", "--json").stdout)["groups"][0]["state"] == "expired"
    sign = broker.msso("sign", "--url", "https://api.example.com/")
    assert sign.returncode == 1 and "has expired; run `msso login" in sign.stderr, sign


def test_a_jump_forward_past_the_window_expires_it_at_once_and_a_jump_back_does_not_revive_it(desktop, idp):
    clock = WallClock(desktop)
    broker = Broker(desktop, idp, groups={GROUP: {"session_timeout": "10m", "expiring_lead": "1m"}},
                    environment=clock.environment)
    try:
        client = subscriber(broker)
        assert broker.login().returncode == 0
        assert next_signal(client, 5)[0] == "LoggedIn"
        assert broker.msso("check").returncode == 0

        jumped = time.monotonic()
        clock.jump(11 * 60)
        name, came = next_signal(client, 5)
        assert name == "Expired", "past the window, Expiring has nothing to say"
        assert came - jumped < 2, f"Expired came {came - jumped:.2f} s after the jump"
        expired_everywhere(broker)

        # The clock put right again: the window it was seen to pass stays passed.
        clock.jump(0)
        expired_everywhere(broker)
        assert broker.login().returncode == 0 and broker.msso("check").returncode == 0
    finally:
        broker.stop()


def test_a_jump_forward_into_the_lead_sends_expiring_at_once(desktop, idp):
    clock = WallClock(desktop)
    broker = Broker(desktop, idp, groups={GROUP: {"session_timeout": "10m", "expiring_lead": "2m"}},
                    environment=clock.environment)
    try:
        client = subscriber(broker)
        assert broker.login().returncode == 0
        assert next_signal(client, 5)[0] == "LoggedIn"

        jumped = time.monotonic()
        clock.jump(9 * 60)
        name, came = next_signal(client, 5)
        assert name == "Expiring" and came - jumped < 2, (name, came - jumped)
        status = json.loads(broker.msso("check", "--json").stdout)
        assert status["state"] == "valid"
        assert status["sessionExpiresAt"] - (time.time() + 9 * 60) < 61, "about a minute left, on mssod's clock"
    finally:
        broker.stop()


def test_a_jump_back_does_not_lengthen_the_window_in_elapsed_time(desktop, idp):
    # The shortest window this test's steps fit in: the jump and a check come before Expiring.
    clock = WallClock(desktop)
    broker = Broker(desktop, idp, groups={GROUP: {"session_timeout": "3s", "expiring_lead": "1s"}},
                    environment=clock.environment)
    try:
        client = subscriber(broker)
        started = time.monotonic()
        assert broker.login().returncode == 0
        logged_in = time.monotonic()  # the window began between `started` and now
        assert next_signal(client, 5)[0] == "LoggedIn"

        clock.jump(-5 * 60)
        status = json.loads(broker.msso("check", "--json").stdout)
        assert status["state"] == "valid", "a jump back does not end the window either"
        assert status["sessionExpiresAt"] - (time.time() - 5 * 60) <= 3, "what is left, not the stored end 5 min away"

        name, came = next_signal(client, 5)
        assert name == "Expiring" and started + 2 - 0.05 < came < logged_in + 2 + 1.5, (name, came - started)
        name, came = next_signal(client, 5)
        assert name == "Expired", name
        assert started + 3 - 0.05 < came < logged_in + 3 + 1.5, f"Expired came {came - started:.2f} s after the login began"
        expired_everywhere(broker)
    finally:
        broker.stop()


def test_a_refresh_made_while_the_clock_was_ahead_is_renewed_when_the_token_really_ends(desktop):
    """A blind attack's finding: mssod's clock hours ahead for one refresh, then put right; the IdP's
    token lives seconds, yet msso went on serving it for hours (its life was on the wall clock alone;
    now on both, as the window's)."""
    from harness import IdP
    provider = IdP(token_ttl=3)
    clock = WallClock(desktop)
    broker = Broker(desktop, provider, groups={GROUP: {"session_timeout": "12h", "session_max": "24h", "refresh_lead": "1s"}},
                    environment=clock.environment)
    try:
        assert broker.login().returncode == 0
        clock.jump(6 * 3600)
        ahead = broker.msso("sign", "--url", "https://api.example.com/")  # expired on this clock: refreshes
        assert ahead.returncode == 0, ahead.stderr
        clock.jump(0)
        # The token the refresh brought ends 3 s after it, by the IdP's clock (which is right): from
        # then on msso must renew it rather than hand it out.
        token = ahead.stdout.strip().rpartition(" ")[2]
        claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
        sleep_until(claims["exp"] + 0.1)
        after = broker.msso("sign", "--url", "https://api.example.com/")
        assert after.returncode == 0, after.stderr
        assert after.stdout != ahead.stdout, "the expired token was handed out again"
    finally:
        broker.stop()
        provider.cleanup()
