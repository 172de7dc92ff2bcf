"""`kill -9` of mssod never loses or resurrects a session: the keyring is the truth after a crash."""
import base64
import hashlib
import json
import os
import signal
import subprocess
import threading
import time
from collections import Counter

import pytest

from faults import frozen, idp_helpers, kept_refresh_answer, kill_hard, rescue_key
from harness import BIN, GROUP, SECRETS, Broker, IdP, RawClient, wait_for
from test_refresh import introspect

URL = "https://api.example.com/items"
SESSION_KEYS = ("state", "username", "loggedInAt", "sessionExpiresAt", "sessionMaxAt", "issuer")


def session(broker):
    done = broker.msso("check", "--json")
    status = json.loads(done.stdout)
    return done.returncode, {key: status.get(key) for key in SESSION_KEYS}


def stored(desktop):
    item = desktop.keyring_item()
    if item:
        SECRETS.update([item[1]["accessToken"], item[1]["refreshToken"]])
    return item


def signed_token(broker):
    done = broker.msso("sign", "--url", URL)
    assert done.returncode == 0, done.stderr
    name, _, value = done.stdout.strip().partition(": ")
    assert name == "Authorization" and value.startswith("Bearer ")
    return value.removeprefix("Bearer ")


def userinfo(idp, token):
    done = subprocess.run(["curl", "-sf", "-H", f"Authorization: Bearer {token}", f"{idp.issuer}/userinfo"],
                          capture_output=True, text=True, timeout=10)
    return done.returncode, json.loads(done.stdout) if done.returncode == 0 else None


def crash_and_restart(broker):
    kill_hard(broker)
    assert broker.socket.exists(), "a crash leaves the socket file behind"
    broker.start()


def test_a_crash_keeps_the_session(broker, desktop, idp):
    assert broker.login().returncode == 0
    code, before = session(broker)
    assert code == 0 and before["state"] == "valid"
    item = stored(desktop)
    crash_and_restart(broker)
    code, after = session(broker)
    assert code == 0 and after == before
    assert stored(desktop) == item
    status, claims = userinfo(idp, signed_token(broker))
    assert status == 0 and claims["sub"]


def test_a_crash_after_logout_stays_logged_out(broker, desktop):
    assert broker.login().returncode == 0
    assert broker.msso("logout").returncode == 0
    crash_and_restart(broker)
    assert broker.msso("check").returncode == 2
    assert broker.msso("sign", "--url", URL).returncode == 2
    assert desktop.keyring_item() is None


def test_a_crash_keeps_an_extended_window(broker, desktop):
    assert broker.login().returncode == 0
    _, before = session(broker)
    # No wait: extend moves the window to 30 min from its own moment, later than the login's by the
    # time `check` took (the times are to the microsecond, and compared to the millisecond here:
    # pytest.approx's default, a millionth, is half an hour of a time since 1970).
    extended = json.loads(broker.msso("extend", "--json").stdout)
    assert extended["sessionExpiresAt"] > before["sessionExpiresAt"] + 1e-3
    crash_and_restart(broker)
    code, after = session(broker)
    assert code == 0
    assert after["sessionExpiresAt"] == pytest.approx(extended["sessionExpiresAt"], abs=1e-3)
    assert after["loggedInAt"] == before["loggedInAt"]
    assert stored(desktop)[1]["sessionExpiresAt"] == pytest.approx(extended["sessionExpiresAt"], abs=1e-3)


def burst(broker, clients=4, replies=40):
    """Signs as fast as `clients` connections can, kills mssod -9 once `replies` signs were
    answered (the signs go on meanwhile); the outcomes."""
    outcomes, stop = Counter(), threading.Event()
    lock = threading.Lock()
    # Every client connected (and greeted) before the burst: a thread still connecting when mssod
    # is killed would count the kill as a refused connection.
    connected = [RawClient(broker.socket) for _ in range(clients)]

    def signer(client):
        while not stop.is_set():
            try:
                reply = client.call("sign", {"method": "GET", "url": URL})
            except OSError as error:
                with lock:
                    outcomes[type(error).__name__] += 1
                return
            with lock:
                if reply is None:
                    outcomes["closed"] += 1
                    return
                if reply["type"] == "reply":
                    SECRETS.add(reply["result"]["headers"][0][1].removeprefix("Bearer "))
                outcomes[reply.get("error", reply["type"])] += 1

    threads = [threading.Thread(target=signer, args=(client,)) for client in connected]
    for thread in threads:
        thread.start()
    wait_for(lambda: outcomes["reply"] >= replies or not any(thread.is_alive() for thread in threads),
             what=f"{replies} signs answered")
    kill_hard(broker)
    stop.set()
    for thread in threads:
        thread.join(timeout=10)
    return outcomes


def test_a_crash_in_a_burst_of_signs_loses_nothing(broker, desktop, idp):
    assert broker.login().returncode == 0
    _, before = session(broker)
    item = stored(desktop)
    outcomes = burst(broker)
    print(f"burst outcomes: {dict(outcomes)}")
    assert outcomes["reply"] > 20, outcomes
    assert set(outcomes) <= {"reply", "closed", "ConnectionResetError", "BrokenPipeError"}, outcomes
    broker.start()
    code, after = session(broker)
    assert code == 0 and after == before
    assert stored(desktop) == item
    status, claims = userinfo(idp, signed_token(broker))
    assert status == 0 and claims["sub"]


@pytest.fixture
def rotating(desktop):
    """mssod on an IdP of its own (to be held), every sign a refresh (refresh_lead), alice logged in:
    (the IdP, mssod, the keyring item)."""
    provider = IdP()
    daemon = Broker(desktop, provider, groups={GROUP: {"refresh_lead": "3600s"}}, args=["--keyring-timeout", "3"])
    try:
        assert daemon.login().returncode == 0
        _, item = stored(desktop)
        yield provider, daemon, item
    finally:
        daemon.stop()
        provider.cleanup()


def refresh_held_at_the_idp(desktop, provider, daemon, url=URL):
    """Call inside `frozen(provider.pid())`: starts a sign, whose refresh is then under way, past the check
    that the store can take its answer, announced by mssod-idp, and waiting for the held IdP. (The sign,
    mssod-idp's pid.)"""
    sign = subprocess.Popen([BIN / "msso", "sign", "--url", url], env=daemon.env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    helper = wait_for(lambda: idp_helpers(daemon.process.pid), what="the refresh to start")[0]
    wait_for(lambda: kept_refresh_answer(desktop), what="mssod-idp to announce the refresh")
    return sign, helper


def the_rotated_token_is_stored_alone(desktop, provider, item):
    """The rotated refresh token is the one stored, alive at the IdP, and no answer is kept beside it."""
    rotated = stored(desktop)[1]["refreshToken"]
    assert rotated != item["refreshToken"] and introspect(provider, rotated)
    assert not kept_refresh_answer(desktop)


def test_a_crash_between_rotation_and_the_keyring_write(desktop, rotating):
    """The IdP rotates the refresh token on every use. If mssod dies after the IdP answered and before the
    keyring write, the keyring keeps the old, now revoked, refresh token: the session would be lost, but
    mssod-idp kept the answer (in the kernel keyring) and the next mssod takes it. Made deterministic by
    holding the IdP until the refresh is under way, then freezing the keyring so the write hangs; a kill -9
    in a burst of signs that each refresh hits this window about half the time (`make faults` counts it)."""
    provider, daemon, item = rotating
    with frozen(provider.pid()):
        sign, helper = refresh_held_at_the_idp(desktop, provider, daemon)
        keyring = frozen(desktop.keyring.pid)
        keyring.__enter__()
    try:
        # The IdP has rotated the refresh token (the old one is spent); mssod waits on the keyring to store it.
        wait_for(lambda: not introspect(provider, item["refreshToken"]), interval=0.1, what="the IdP to rotate")
        kill_hard(daemon)
        sign.wait(timeout=10)
    finally:
        keyring.__exit__(None, None, None)
    # Its answer kept (else, on a loaded machine, the next mssod may find the request still
    # announced, wait for it and take it that way: nothing lost, but not the path this test means).
    wait_for(lambda: not os.path.exists(f"/proc/{helper}"), what="mssod-idp to keep the answer and end")
    daemon.start()
    after = daemon.msso("sign", "--url", URL)
    assert after.returncode == 0, after.stderr
    the_rotated_token_is_stored_alone(desktop, provider, item)
    assert daemon.logged("took the answer to a refresh that an earlier mssod did not store") == 1


def test_a_stop_during_a_refresh_waits_for_the_answer_and_stores_it(desktop, rotating):
    """SIGTERM (what `systemctl --user stop`, an upgrade or the end of a desktop session sends) while a
    refresh waits for the IdP: mssod waits for the answer (a few seconds at most) and stores the rotated
    token before it goes."""
    provider, daemon, item = rotating
    with frozen(provider.pid()):
        sign, _ = refresh_held_at_the_idp(desktop, provider, daemon)
        daemon.process.send_signal(signal.SIGTERM)
        wait_for(lambda: daemon.logged("waiting for the refreshes and logouts under way"), what="mssod to wait")
    daemon.process.wait(timeout=5)
    sign.wait(timeout=10)
    the_rotated_token_is_stored_alone(desktop, provider, item)
    daemon.start()
    assert daemon.msso("sign", "--url", URL).returncode == 0


def test_a_stop_that_outlasts_the_refresh_leaves_its_answer_to_the_next_mssod(desktop, rotating):
    """The same, with an IdP that answers only after mssod has given up waiting and gone: mssod-idp
    outlives it, keeps the answer, and the next mssod takes it."""
    provider, daemon, item = rotating
    with frozen(provider.pid()):
        sign, helper = refresh_held_at_the_idp(desktop, provider, daemon)
        daemon.process.send_signal(signal.SIGTERM)
        daemon.process.wait(timeout=5)
        os.kill(helper, signal.SIGTERM)  # as a unit's stop sends it to every process of the unit
    sign.wait(timeout=10)
    wait_for(lambda: not os.path.exists(f"/proc/{helper}"), what="mssod-idp to end")
    assert kept_refresh_answer(desktop)
    assert not introspect(provider, item["refreshToken"])  # spent: only the kept answer holds the session
    daemon.start()
    assert daemon.msso("sign", "--url", URL).returncode == 0
    the_rotated_token_is_stored_alone(desktop, provider, item)


def test_an_answer_kept_past_its_store_is_dropped_without_revoking_the_session(desktop, rotating):
    """mssod killed after it stored a refresh's answer and before it removed the kept copy: the next
    mssod finds an answer that does not answer the stored refresh token (it is the stored one). It drops
    it, and must not revoke its refresh token, which is the session's own (`make faults` lost 5 of 25
    sessions to this before). Planted as mssod-idp writes it: the tag, a line feed, the IdP's body."""
    provider, daemon, item = rotating
    daemon.stop()
    spent = base64.urlsafe_b64encode(hashlib.sha256(b"an earlier refresh token").digest()).rstrip(b"=").decode()
    body = json.dumps({"access_token": item["accessToken"], "refresh_token": item["refreshToken"],
                       "token_type": "bearer", "expires_in": 3600})
    planted = desktop.run(["keyctl", "session", "-", "sh", "-c",
                           f'keyctl padd user "{rescue_key(desktop)}" "$(keyctl get_persistent @s)"'],
                          input=f"{spent} {int(time.time())}\n{body}")
    assert planted.returncode == 0, planted.stderr
    daemon.start()
    assert daemon.msso("sign", "--url", URL).returncode == 0  # refreshes (refresh_lead) with the stored token
    assert not kept_refresh_answer(desktop)
    the_rotated_token_is_stored_alone(desktop, provider, item)


def test_a_new_mssod_waits_for_the_refresh_a_killed_one_left_under_way(desktop, rotating):
    """mssod killed while its refresh waits for the IdP, and started again at once (socket activation,
    `systemctl restart`): its first sign must not spend the same refresh token again (glewlwyd, seeing
    it twice, ends the whole chain: an outside attack lost 6 of 6 sessions so). It waits for the answer
    the killed mssod's mssod-idp brings, and takes it."""
    provider, daemon, item = rotating
    with frozen(provider.pid()):
        first, helper = refresh_held_at_the_idp(desktop, provider, daemon)
        kill_hard(daemon)
        first.wait(timeout=10)
        daemon.start()
        second = subprocess.Popen([BIN / "msso", "sign", "--url", URL], env=daemon.env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        with pytest.raises(subprocess.TimeoutExpired):
            second.wait(timeout=0.5)  # it waits for the killed mssod's request, which the IdP holds
    out, err = second.communicate(timeout=20)
    assert second.returncode == 0, err
    wait_for(lambda: not os.path.exists(f"/proc/{helper}"), what="mssod-idp to end")
    assert daemon.logged("took the answer of a refresh an earlier mssod had under way") == 1, daemon.log.read_text()[-4000:]
    assert daemon.msso("sign", "--url", URL).returncode == 0
    the_rotated_token_is_stored_alone(desktop, provider, item)


def test_a_second_mssod_of_the_user_does_not_start(broker, desktop, idp):
    """Found by an outside test: a second mssod of the same user on another socket spent the
    refresh token the first one held, and a provider rotating them ended the session (6 of 6).
    The second now refuses to start, naming the first, and the first serves on."""
    assert broker.login().returncode == 0
    second = subprocess.run([*desktop.prefix, BIN / "mssod", "--socket", str(desktop.runtime / "second.sock")],
                            env=broker.env, capture_output=True, text=True, timeout=30)
    assert second.returncode == 1, second.stderr
    assert f"another mssod (pid {broker.process.pid}) already runs for this user" in second.stderr, second.stderr
    assert not (desktop.runtime / "second.sock").exists()
    assert signs(broker)
    kill_hard(broker)
    broker.start()  # the lock goes with the process, however it ends
    assert signs(broker)


def signs(broker) -> bool:
    return broker.msso("sign", "--url", URL).returncode == 0


def test_a_stop_during_a_logout_of_every_group_lets_it_finish(desktop):
    """Found by an outside test: SIGTERM during `msso logout --all` left the sessions it had not
    reached yet logged in (3 of 3). Here the provider holds the first revocation unanswered, mssod
    is stopped meanwhile, and the hold ends. Expected: mssod lets the logout finish before it
    exits (as it does a refresh, 3 s at most), and none of the three groups is logged in after."""
    from fake_idp import FakeIdP
    upstream = IdP()
    fake = FakeIdP(upstream)
    groups = [GROUP, "com.example.second", "com.example.third"]
    daemon = Broker(desktop, fake, groups={group: {} for group in groups})
    try:
        for group in groups:
            assert daemon.login(group=group).returncode == 0
        fake.revoke_hold = True
        logout = subprocess.Popen([*desktop.prefix, BIN / "msso", "logout", "--all"], env=daemon.env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        wait_for(lambda: fake.recorded("POST", "/revoke"), timeout=20, what="the logout to ask for the first revocation")
        process = daemon.process
        process.send_signal(signal.SIGTERM)
        fake.revoke_hold = False
        fake.release()
        process.wait(timeout=10)
        daemon.process = None
        logout.communicate(timeout=20)
        daemon.start()
        for group in groups:
            assert daemon.msso("check", "--group", group).returncode == 2, f"{group} still logged in"
    finally:
        daemon.stop()
        fake.stop()
        upstream.cleanup()


def test_a_crash_in_the_middle_of_a_logout_leaves_no_token_alive_at_the_provider(desktop):
    """Found by an outside test: mssod killed after a logout deleted the item but before it revoked
    the tokens left the refresh token alive at glewlwyd, out of reach of any later logout (no item
    left to find). Here the provider holds the revocation unanswered, mssod is killed meanwhile
    and started again. Expected: never logged in again, and the next mssod finishes the logout:
    the refresh and access tokens are inactive at glewlwyd."""
    from fake_idp import FakeIdP
    upstream = IdP()
    fake = FakeIdP(upstream)
    daemon = Broker(desktop, fake)
    try:
        assert daemon.login().returncode == 0
        tokens = desktop.keyring_item()[1]
        SECRETS.update([tokens["refreshToken"], tokens["accessToken"]])
        fake.revoke_hold = True
        logout = subprocess.Popen([*desktop.prefix, BIN / "msso", "logout"], env=daemon.env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        wait_for(lambda: fake.recorded("POST", "/revoke"), timeout=20, what="the logout to ask for the revocation")
        kill_hard(daemon)
        logout.communicate(timeout=20)
        fake.revoke_hold = False
        fake.release()
        daemon.start()
        assert daemon.msso("check").returncode == 2, "never a session again"
        wait_for(lambda: not upstream.introspect(tokens["refreshToken"]).get("active"), timeout=20,
                 what="the next mssod to revoke the refresh token")
        assert not upstream.introspect(tokens["accessToken"]).get("active")
        wait_for(lambda: desktop.keyring_item() is None, timeout=10, what="the item deleted")
    finally:
        daemon.stop()
        fake.stop()
        upstream.cleanup()
