"""The keyring under faults: gone, started again locked, its bus restarted, full. Whatever happens,
a session is never read as "not logged in" while its keyring cannot be read, and a logout that could
not delete it never says it did."""
import json
import os
import signal
import subprocess

from faults import kept_refresh_answer
from harness import BIN, GROUP, SECRETS, Broker, IdP, wait_for
from test_faults import refresh_token_active, remember

URL = "https://api.example.com/items"


def relaunch_keyring_locked(desktop):
    """gnome-keyring killed and started again, as D-Bus activation does after it died: locked, and
    showing none of its items until it is unlocked."""
    desktop.stop_keyring()
    desktop.start_keyring(unlock=False)


def test_a_logout_on_a_keyring_started_again_locked_says_so_and_ends_nothing(broker, desktop, idp):
    assert broker.login().returncode == 0
    _, secret = remember(desktop.keyring_item())
    relaunch_keyring_locked(desktop)
    done = broker.msso("logout")
    assert done.returncode == 4, done.stdout + done.stderr
    assert "the keyring is locked, so msso could not log out" in done.stderr and "unlock it" in done.stderr
    assert "Logged out" not in done.stdout
    desktop.unlock_keyring()
    # Nothing was ended: the session is there and signs, its refresh token alive at the IdP.
    assert desktop.keyring_item() is not None
    assert refresh_token_active(idp, secret["refreshToken"])
    assert broker.msso("sign", "--url", URL).returncode == 0
    # And now the logout goes through, all of it.
    done = broker.msso("logout")
    assert done.returncode == 0 and "Logged out" in done.stdout, done.stderr
    assert desktop.keyring_item() is None
    assert not refresh_token_active(idp, secret["refreshToken"])


def test_a_keyring_started_again_locked_is_not_read_as_logged_out(desktop, idp):
    daemon = Broker(desktop, idp)
    try:
        assert daemon.login().returncode == 0
        remember(desktop.keyring_item())
        daemon.stop()
        relaunch_keyring_locked(desktop)
        daemon.start()
        done = daemon.msso("check")
        assert done.returncode == 4 and "the keyring is locked" in done.stderr, done.stdout + done.stderr
        desktop.unlock_keyring()
        done = daemon.msso("check")
        assert done.returncode == 0 and "logged in as alice" in done.stdout, done.stdout + done.stderr
    finally:
        daemon.stop()


def test_a_keyring_gone_when_mssod_starts_is_not_read_as_logged_out(desktop, idp):
    """mssod started while gnome-keyring is dead: it does not fall back to the kernel keyring (where no
    session is) but keeps to the Secret Service, which it used before, and says to start it."""
    daemon = Broker(desktop, idp)
    try:
        assert daemon.login().returncode == 0
        remember(desktop.keyring_item())
        daemon.stop()
        desktop.stop_keyring()
        daemon.start()
        assert daemon.logged("msso keeps its sessions in the Secret Service") == 1
        for verb in (["status"], ["check"], ["sign", "--url", URL], ["logout"]):
            done = daemon.msso(*verb)
            assert done.returncode == 4, (verb, done.stdout, done.stderr)
            assert "no Secret Service on this session bus" in done.stderr, (verb, done.stderr)
        desktop.start_keyring()
        done = daemon.msso("check")
        assert done.returncode == 0 and "logged in as alice" in done.stdout, done.stdout + done.stderr
    finally:
        daemon.stop()


def test_a_first_start_without_a_keyring_still_uses_the_kernel_keyring(idp):
    """The marker is what keeps mssod to the Secret Service: without one (msso never used a keyring
    here: an SSH login to a server), `auto` takes the kernel keyring as before."""
    from harness import Desktop
    session = Desktop(keyring=False)
    try:
        daemon = Broker(session, idp)
        try:
            status = daemon.msso("status")
            assert "Sessions are kept in the kernel keyring" in status.stdout, status.stdout
        finally:
            daemon.stop()
    finally:
        session.cleanup()


def test_mssod_reconnects_to_a_session_bus_that_came_back(desktop, idp):
    """The session bus and the keyring restarted on the same address (a desktop session's restart):
    mssod's next calls reach the new ones, and a refresh is stored there, not kept in memory only."""
    daemon = Broker(desktop, idp, groups={GROUP: {"refresh_lead": "3600s"}})
    try:
        assert daemon.login().returncode == 0
        _, before = remember(desktop.keyring_item())
        desktop.stop_bus()
        done = daemon.msso("check")
        assert done.returncode == 0, done.stderr  # from memory: the keyring was read before
        desktop.start_bus()
        desktop.start_keyring()
        done = daemon.msso("sign", "--url", URL)  # refreshes (refresh_lead): the rotated token is stored
        assert done.returncode == 0, done.stderr
        _, after = remember(desktop.keyring_item())
        assert after["refreshToken"] != before["refreshToken"] and refresh_token_active(idp, after["refreshToken"])
        daemon.restart()
        assert daemon.msso("sign", "--url", URL).returncode == 0
    finally:
        daemon.stop()


def test_a_locked_keyring_spends_no_refresh_token(desktop, idp):
    """A refresh whose answer could not be stored (the keyring locked) is not made: the one-use refresh
    token stays unspent, the token that still works is served, and a restart before the unlock loses
    nothing."""
    daemon = Broker(desktop, idp, groups={GROUP: {"refresh_lead": "3600s"}})  # every sign wants a refresh
    try:
        assert daemon.login().returncode == 0
        _, item = remember(desktop.keyring_item())
        desktop.lock_keyring()
        done = daemon.msso("sign", "--url", URL)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"Authorization: Bearer {item['accessToken']}"  # the current token, as it is
        assert refresh_token_active(idp, item["refreshToken"]), "the refresh token was spent"
        daemon.restart()
        assert daemon.msso("check").returncode == 4
        desktop.unlock_keyring()
        assert daemon.msso("sign", "--url", URL).returncode == 0
        _, after = remember(desktop.keyring_item())
        assert after["refreshToken"] != item["refreshToken"] and refresh_token_active(idp, after["refreshToken"])
    finally:
        daemon.stop()


def test_a_locked_keyring_and_an_expired_token_say_to_unlock_and_spend_nothing(desktop):
    provider = IdP(token_ttl=2)
    daemon = Broker(desktop, provider)
    try:
        assert daemon.login().returncode == 0
        _, item = remember(desktop.keyring_item())
        desktop.lock_keyring()
        from harness import sleep_until
        sleep_until(item["accessTokenExpiresAt"] + 0.1)
        done = daemon.msso("sign", "--url", URL)
        assert done.returncode == 4 and "the keyring is locked" in done.stderr and "unlock it" in done.stderr, done.stderr
        assert refresh_token_active(provider, item["refreshToken"])
        desktop.unlock_keyring()
        assert daemon.msso("sign", "--url", URL).returncode == 0
    finally:
        daemon.stop()
        provider.cleanup()


def test_a_bus_down_when_mssod_starts_is_not_read_as_logged_out_and_is_used_once_back(desktop, idp):
    daemon = Broker(desktop, idp)
    try:
        assert daemon.login().returncode == 0
        remember(desktop.keyring_item())
        daemon.stop()
        desktop.stop_bus()
        daemon.start()
        done = daemon.msso("check")
        assert done.returncode == 4 and "no Secret Service on this session bus" in done.stderr, done.stdout + done.stderr
        desktop.start_bus()
        desktop.start_keyring()
        done = daemon.msso("check")
        assert done.returncode == 0 and "logged in as alice" in done.stdout, done.stdout + done.stderr
        assert daemon.msso("sign", "--url", URL).returncode == 0
    finally:
        daemon.stop()


def test_a_group_moved_to_another_provider_sends_the_old_tokens_nowhere(desktop, idp):
    """An administrator points a group at another identity provider while a session of the first one is
    stored: that session is over (check, sign say so), and its tokens are sent nowhere, least of all to the
    new provider (an outside attack saw the old refresh token reach the new provider's revocation
    endpoint at the next login)."""
    from fake_idp import FakeIdP
    other = FakeIdP(idp)  # another issuer, in front of the same glewlwyd
    daemon = Broker(desktop, idp)
    try:
        assert daemon.login().returncode == 0
        _, old = remember(desktop.keyring_item())
        daemon.stop()
        daemon.write_config({GROUP: {}}, other)
        daemon.start()
        done = daemon.msso("check")
        assert done.returncode == 1 and "session expired" in done.stdout, done.stdout + done.stderr
        done = daemon.msso("sign", "--url", URL)
        assert done.returncode == 1 and "was made with another identity provider" in done.stderr, done.stderr
        assert daemon.msso("logout").returncode == 0
        assert daemon.login().returncode == 0
        assert daemon.msso("sign", "--url", URL).returncode == 0
        sent = b"".join(request.body for request in other.requests)
        assert other.requests and old["refreshToken"].encode() not in sent and old["accessToken"].encode() not in sent
        assert refresh_token_active(idp, old["refreshToken"]), "nor revoked at the old provider through the new one"
    finally:
        daemon.stop()
        other.stop()


def test_a_hostile_store_marker_is_no_marker(idp):
    """The file that keeps `auto` to the Secret Service is in a directory the user's programs write: a
    FIFO there (a read would block mssod's start), a link to another file saying the same, or other text
    are each no marker."""
    from harness import Desktop
    session = Desktop(keyring=False)
    try:
        state = session.home / ".local" / "state" / "msso"
        state.mkdir(parents=True)
        elsewhere = session.home / "elsewhere"
        elsewhere.write_text("secret-service\n")
        for plant in (lambda path: os.mkfifo(path), lambda path: path.symlink_to(elsewhere),
                      lambda path: path.write_text("secret-service\nand more\n")):
            marker = state / "store"
            marker.unlink(missing_ok=True)
            plant(marker)
            session.chown(state, recursive=True)
            daemon = Broker(session, idp)  # starts, and waits for its choice of store
            try:
                status = daemon.msso("status")
                assert "Sessions are kept in the kernel keyring" in status.stdout, status.stdout + status.stderr
            finally:
                daemon.stop()
    finally:
        session.cleanup()
