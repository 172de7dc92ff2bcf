"""After `logout` returns, no `sign` in that group succeeds, even with 16 clients signing
concurrently while it runs (docs/PROTOCOL.md, Semantics: logout).

Two ways to sign: with a fresh token (the hot path, served from memory), and with every sign
refreshing the token at the IdP first (refresh_lead longer than the token's life), so that a
refresh is nearly always in flight when logout arrives and must not write the session back.
"""
import threading
import time

import pytest

from harness import GROUP, SECRETS, Broker, IdP, wait_for

from msso import Client as MSSOClient, MSSOError  # the Python library, clients/python

CLIENTS = 16
ROUNDS = 3
URL = "https://api.example.com/items"


class Signer(threading.Thread):
    """Signs in a tight loop on its own connection, recording (sent, answered, outcome) per sign;
    the outcome is the token on success, else the error's name."""

    def __init__(self, client, start_together, stop):
        super().__init__(daemon=True)
        self.client, self.start_together, self.stop = client, start_together, stop
        self.signs = []
        self.crash = None

    def run(self):
        try:
            self.start_together.wait(timeout=10)
            while not self.stop.is_set():
                sent = time.monotonic()  # taken before the call is even encoded: errs towards "early"
                try:
                    ((name, value),) = self.client.sign("GET", URL)
                    assert name == "Authorization" and value.startswith("Bearer ")
                    outcome = ("ok", value.split(" ", 1)[1])
                except MSSOError as error:
                    outcome = (error.name, None)
                self.signs.append((sent, time.monotonic(), *outcome))
        except BaseException as error:  # noqa: BLE001 (reported by the test)
            self.crash = error


def run_briefly(client, count=5):
    outcomes = []
    for _ in range(count):
        try:
            client.sign("GET", URL)
            outcomes.append((None, None, "ok"))
        except MSSOError as error:
            outcomes.append((None, None, error.name))
    return outcomes


def run_round(broker, clients):
    start_together = threading.Barrier(CLIENTS + 1)
    stop = threading.Event()
    signers = [Signer(client, start_together, stop) for client in clients]
    for signer in signers:
        signer.start()
    start_together.wait(timeout=10)

    # Let every signer get going: each has succeeded at least a few times.
    deadline = time.monotonic() + 10
    while not all(sum(1 for s in signer.signs if s[2] == "ok") >= 3 for signer in signers):
        assert time.monotonic() < deadline, "the signers never got going"
        time.sleep(0.01)

    logout_started = time.monotonic()
    done = broker.msso("logout")
    logout_returned = time.monotonic()
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"Logged out of {GROUP}."

    # Keep signing after, until each signer has sent 3 signs since logout returned: every one of
    # these must fail.
    wait_for(lambda: all(sum(s[0] > logout_returned for s in signer.signs) >= 3 or not signer.is_alive() for signer in signers),
             what="3 signs of each signer sent after logout returned")
    stop.set()
    for signer in signers:
        signer.join(timeout=10)
        assert not signer.is_alive(), "a signer hung"
        assert signer.crash is None, repr(signer.crash)
    return signers, logout_started, logout_returned


@pytest.fixture(scope="module")
def short_lived_idp():
    provider = IdP(token_ttl=40)
    yield provider
    provider.cleanup()


@pytest.fixture(params=["fresh token", "refresh on every sign"])
def scenario(request, desktop, idp):
    if request.param == "fresh token":
        daemon = Broker(desktop, idp)
    else:
        daemon = Broker(desktop, request.getfixturevalue("short_lived_idp"), groups={GROUP: {"refresh_lead": "1h"}})
    yield daemon
    daemon.stop()


def test_no_sign_succeeds_after_logout_returns(scenario, desktop):
    broker = scenario
    clients = [MSSOClient(broker.socket, client=f"signer-{n}") for n in range(CLIENTS)]
    try:
        for round in range(ROUNDS):
            assert broker.login().returncode == 0
            signers, logout_started, logout_returned = run_round(broker, clients)
            signs = [sign for signer in signers for sign in signer.signs]
            SECRETS.update(token for *_, outcome, token in signs if token)

            before = [s for s in signs if s[1] < logout_started]        # answered before logout began
            during = [s for s in signs if s[1] >= logout_started and s[0] <= logout_returned]
            after = [s for s in signs if s[0] > logout_returned]         # sent after logout returned
            late_successes = [s for s in after if s[2] == "ok"]
            summary = (f"round {round}: {len(before)} signs before logout, {len(during)} overlapping it "
                       f"({sum(s[2] == 'ok' for s in during)} ok), {len(after)} after; "
                       f"logout took {logout_returned - logout_started:.3f} s")
            print(summary)

            assert not late_successes, (
                f"{len(late_successes)} signs sent after logout returned succeeded, the first sent "
                f"{late_successes[0][0] - logout_returned:.4f} s after it returned; {summary}")
            assert before and all(s[2] == "ok" for s in before), summary
            assert {s[2] for s in after} == {"NotLoggedIn"}, summary
            for signer in signers:  # every connection, not just some, saw the logout
                assert any(s[0] > logout_returned for s in signer.signs), f"a signer never signed after; {summary}"
            # While logout ran, signs either got a token or NotLoggedIn: no other error (say Internal).
            assert {s[2] for s in during} <= {"ok", "NotLoggedIn"}, summary
            # Nothing wrote the session back behind logout's back (a refresh finishing late, say).
            time.sleep(0.2)  # an interval in which nothing may happen
            assert broker.msso("check").returncode == 2
            assert desktop.keyring_item() is None
            assert {s[2] for s in run_briefly(clients[0])} == {"NotLoggedIn"}
    finally:
        for client in clients:
            client.close()
