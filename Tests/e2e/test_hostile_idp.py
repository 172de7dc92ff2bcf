"""A hostile (or broken) identity provider: real mssod and keyring, the fault-injecting fake
(fake_idp.py) in front of the real glewlwyd.

What the user must see each time: a refusal in a sentence naming the problem, no credential sent
where it should not go, a daemon that keeps serving everybody else, and (for a refresh the IdP
cannot answer now) a session that is kept rather than lost. Figures are printed (run with -s).
"""
import json
import signal
import subprocess
import time

import pytest

from fake_idp import FakeIdP, Recorder
from harness import BIN, GROUP, PASSWORDS, SECRETS, Broker, IdP, RawClient, memory, wait_for

URL = "https://api.example.com/items"
PASSWORD = PASSWORDS["alice"]


@pytest.fixture
def fake(idp):
    """The fake in front of the session's glewlwyd, with every switch off."""
    proxy = FakeIdP(idp)
    yield proxy
    proxy.stop()


@pytest.fixture
def third():
    """A third origin that a hostile IdP tries to send the credentials to."""
    recorder = Recorder()
    yield recorder
    recorder.stop()


@pytest.fixture
def broker(desktop, fake):
    daemon = Broker(desktop, fake)
    yield daemon
    daemon.stop()


def serving(broker):
    """mssod is alive and answers a call that touches no state, at once."""
    assert broker.alive(), broker.log.read_text()[-2000:]
    started = time.monotonic()
    client = RawClient(broker.socket, timeout=3)
    try:
        assert client.call("ping", {"data": "still there"})["result"] == {"data": "still there"}
    finally:
        client.close()
    return time.monotonic() - started < 1


def secret_of(fake):
    return fake.secret_file.read_text()


def login(broker, timeout=30):
    started = time.monotonic()
    done = broker.login()
    return done, time.monotonic() - started


# -- where the credentials may go ----------------------------------------------------------------

HOSTILE_DISCOVERY = {
    # name: (how the document lies, words the refusal must say)
    "another issuer": (lambda fake, third: {"issuer": f"{third.origin}/api/oidc",
                                            "token_endpoint": f"{third.origin}/token"},
                       ["says its issuer is", "{third}/api/oidc", "not the configured one"]),
    "token endpoint on plain http off loopback": (lambda fake, third: {"token_endpoint": "http://idp.invalid/token"},
                                                  ["token_endpoint that is not https", "http://idp.invalid/token",
                                                   "refusing to send credentials there"]),
    # A name that only looks like a loopback address: it is any host on the internet.
    "token endpoint on plain http at a host named 127.*": (
        lambda fake, third: {"token_endpoint": "http://127.attacker.invalid/token"},
        ["token_endpoint that is not https", "http://127.attacker.invalid/token", "refusing to send credentials there"]),
}


@pytest.mark.parametrize("case", HOSTILE_DISCOVERY, ids=list(HOSTILE_DISCOVERY))
def test_a_lying_discovery_document_is_refused_before_any_credential_is_sent(broker, fake, third, case):
    """Attack: the discovery document names another issuer (whose token endpoint is a third
    origin), or a token endpoint in plain http off this machine. Expected: `msso login` is refused
    with a sentence naming the problem; the password and the client secret reach nobody (not the
    fake, not the third origin); nothing is stored; the daemon still serves, and logs in once the
    IdP tells the truth again."""
    lie, words = HOSTILE_DISCOVERY[case]
    document = lie(fake, third)
    fake.discovery_issuer = document.pop("issuer", None)
    fake.discovery_overrides = document
    done, took = login(broker)
    print(f"{case}: login exit {done.returncode} in {took:.2f} s: {done.stderr.strip()}")
    # An issuer that is not the configured one is the configuration's to fix (78), not an IdP
    # out of reach (5); an endpoint msso will not use is the IdP's answer, refused (5).
    assert done.returncode == (78 if case == "another issuer" else 5), done.stdout + done.stderr
    for word in words:
        assert word.replace("{third}", third.origin) in done.stderr, (word, done.stderr)
    assert took < 5
    for server, name in ((fake, "the fake IdP"), (third, "the third origin")):
        assert not server.saw(PASSWORD), f"{name} received the password"
        assert not server.saw(secret_of(fake)), f"{name} received the client secret"
    assert fake.recorded(method="POST") == [], "nothing but discovery may be asked of an IdP that lies in it"
    assert third.recorded() == []
    assert broker.msso("check").returncode == 2
    assert serving(broker)
    fake.reset()
    assert broker.login().returncode == 0, "the refusal left the daemon unable to log in to an honest IdP"


def test_a_redirect_from_the_token_endpoint_is_not_followed(broker, fake, third):
    """Attack: the token endpoint answers the password grant with a 307 to a third origin (a 307
    keeps the method and the body: following it would replay the password and the client
    secret there). Expected: the login is refused with a sentence saying msso follows no
    redirect and naming the target; the third origin receives nothing at all. (The configured
    token endpoint itself did receive the password: that is where a password login sends it.)"""
    fake.token_redirect = f"{third.origin}/steal"
    done, took = login(broker)
    print(f"307 from the token endpoint: login exit {done.returncode} in {took:.2f} s: {done.stderr.strip()}")
    assert done.returncode == 5, done.stdout + done.stderr
    assert "redirected /api/oidc/token to" in done.stderr and third.origin in done.stderr
    assert "follows no redirect" in done.stderr
    assert third.recorded() == [], [r.path for r in third.recorded()]
    assert not third.saw(PASSWORD) and not third.saw(secret_of(fake))
    assert len(fake.recorded(method="POST", path_suffix="/token")) == 1, "asked once, not retried"
    assert broker.msso("check").returncode == 2
    assert serving(broker)


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_huge_token_answer_is_cut_off_and_memory_stays_bounded(broker, fake, chunked):
    """Attack: the token endpoint answers 200 with a 10 MB body (announced with Content-Length,
    or chunked, so that no length is known up front). Expected: the login is refused
    with a sentence saying the answer is too large; the daemon reads at most its cap (256 KiB),
    so its peak memory grows by far less than the body (three attempts in a row), and it
    keeps serving."""
    # A first, honest login sets up the HTTP client, so that what follows measures only the body.
    assert broker.login().returncode == 0
    assert broker.msso("logout").returncode == 0
    pid = broker.process.pid
    before = memory(pid)
    fake.token_body_bytes = 10 * 1024 * 1024
    fake.token_body_chunked = chunked
    for attempt in range(3):
        done, took = login(broker)
        print(f"10 MB token answer, attempt {attempt + 1}: login exit {done.returncode} in {took:.2f} s: "
              f"{done.stderr.strip()}")
        assert done.returncode == 5, done.stdout + done.stderr
        assert "sent an answer over 256 KiB" in done.stderr and "refusing it" in done.stderr
    after = memory(pid)
    print(f"mssod memory: VmRSS {before['VmRSS'] // 1024} -> {after['VmRSS'] // 1024} MiB, "
          f"VmHWM {before['VmHWM'] // 1024} -> {after['VmHWM'] // 1024} MiB")
    assert after["VmHWM"] - before["VmHWM"] < 8 * 1024, "the daemon buffered the 10 MB body"
    assert broker.msso("check").returncode == 2
    assert serving(broker)


def test_huge_headers_are_cut_off_and_memory_stays_bounded(broker, fake):
    """Attack: the token endpoint answers 200 with 10 MB of headers (libcurl 7.88 keeps every
    header line and has no total of its own). Expected: the login is refused with a sentence saying
    the headers are too large; mssod reads at most 64 KiB of them, so its peak memory grows by far
    less than they hold; it keeps serving."""
    assert broker.login().returncode == 0  # the HTTP client set up, so that what follows measures the headers
    assert broker.msso("logout").returncode == 0
    pid = broker.process.pid
    before = memory(pid)
    fake.token_header_bytes = 10 * 1024 * 1024
    done, took = login(broker)
    after = memory(pid)
    print(f"10 MB of token answer headers: login exit {done.returncode} in {took:.2f} s: {done.stderr.strip()}; "
          f"VmHWM {before['VmHWM'] // 1024} -> {after['VmHWM'] // 1024} MiB")
    assert done.returncode == 5, done.stdout + done.stderr
    assert "sent headers over 64 KiB" in done.stderr and "refusing it" in done.stderr
    assert after["VmHWM"] - before["VmHWM"] < 8 * 1024, "the daemon kept the 10 MB of headers"
    assert serving(broker)


def test_an_answer_dripped_byte_by_byte_is_given_up_at_the_idp_timeout(desktop, fake):
    """Attack: the token endpoint sends the head of a 200 at once, then the body one byte a
    second (each gap far shorter than any read timeout). Expected: mssod started with
    --idp-timeout 2 gives up on the whole answer after about 2 s, and the login is refused with a
    sentence saying the IdP began to answer but did not finish in time (not that the network is
    down), not left hanging until the CLI blames mssod."""
    broker = Broker(desktop, fake, args=["--idp-timeout", "2"])
    try:
        fake.token_drip = True
        try:
            done, took = login(broker)
        except subprocess.TimeoutExpired:
            pytest.fail("`msso login` got no answer in 60 s")
        print(f"dripped token answer (timeout 2 s): login exit {done.returncode} in {took:.2f} s: {done.stderr.strip()}")
        assert done.returncode == 5, done.stdout + done.stderr
        assert "began to answer but did not finish within 2 s" in done.stderr and "network" not in done.stderr
        assert took < 3.5
        assert serving(broker)
    finally:
        fake.release()
        broker.stop()


# -- device login with hostile numbers -----------------------------------------------------------

def start_device_login(broker):
    """`msso login` (device flow) in the background; returns it once the prompt is shown."""
    cli = subprocess.Popen([BIN / "msso", "login"], env=broker.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    prompt = cli.stderr.readline()
    return cli, prompt


def polls(fake):
    return fake.recorded(method="POST", path_suffix="/token", grant="urn:ietf:params:oauth:grant-type:device_code")


def audit_entries(broker, verb):
    done = broker.msso("audit", "--json", "--since", "1h")
    assert done.returncode == 0, done.stderr
    return [entry for entry in json.loads(done.stdout) if entry["verb"] == verb]


@pytest.mark.parametrize("interval", [1e20, "inf"], ids=["1e20", "inf"])
def test_a_device_login_with_an_absurd_poll_interval(broker, fake, interval):
    """Attack: the device authorization answers `interval` 1e20 (overflows a nanosecond count)
    or "inf". Expected: no crash; the device prompt comes; polling neither floods (1e20 is held
    to 60 s) nor stops for good ("inf" is no number: the default 5 s); other clients are served
    meanwhile; closing the `msso login` client cancels the login (audited as LoginDenied) and,
    where polling had begun, the fake sees it stop."""
    fake.device_interval = interval
    cli, prompt = start_device_login(broker)
    try:
        print(f"interval {interval!r}: {prompt.strip()}")
        assert prompt.startswith("To log in, open ") and "enter the code" in prompt, prompt
        started = time.monotonic()
        for _ in range(3):
            check_started = time.monotonic()
            assert broker.msso("check").returncode == 2
            assert time.monotonic() - check_started < 1, "another client waited behind the device login"
            assert serving(broker)
        if interval == "inf":
            # The default interval: a first poll within about 5 s, and no flood before it.
            first = None
            deadline = time.monotonic() + 9
            while not first and time.monotonic() < deadline:
                first = polls(fake)
                time.sleep(0.1)
            assert first, "with interval \"inf\" the daemon never polled"
            assert len(polls(fake)) <= 2, "polling floods"
        else:
            time.sleep(max(0.0, started + 3 - time.monotonic()))  # no poll comes meanwhile
            assert polls(fake) == [], "an interval of 1e20 made the daemon poll at once (the interval overflowed)"
        assert cli.poll() is None, cli.stderr.read()
        cli.send_signal(signal.SIGKILL)
        cli.wait(timeout=10)
        closed = time.monotonic()
        denied = None
        while not denied and time.monotonic() < closed + 5:
            denied = [e for e in audit_entries(broker, "login") if e.get("error") == "LoginDenied"]
            time.sleep(0.2)
        print(f"interval {interval!r}: login ended in the audit log {time.monotonic() - closed:.2f} s after the "
              f"client was killed; polls so far: {len(polls(fake))}")
        assert denied, "closing the client did not cancel the device login"
        seen = len(polls(fake))
        if interval == "inf":
            # More than the 5 s interval after the last poll: a login still polling would have polled again.
            time.sleep(max(0.0, polls(fake)[-1].time + 5 + 1.5 - time.monotonic()))
            assert len(polls(fake)) == seen, "the cancelled device login kept polling"
        assert broker.alive()
        assert serving(broker)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()


def test_expired_token_while_polling_ends_the_device_login_at_once(broker, fake):
    """Attack (or an honest IdP): the device code expires; polls get `expired_token`. Expected:
    the login ends at the first such answer with LoginDenied (exit 6) and a sentence saying the
    code expired and to log in again; no further polls."""
    fake.device_interval = 1
    fake.device_poll_error = "expired_token"
    cli, prompt = start_device_login(broker)
    shown = time.monotonic()
    try:
        assert "enter the code" in prompt, prompt
        out, err = cli.communicate(timeout=15)
    finally:
        if cli.poll() is None:
            cli.kill()
    took = time.monotonic() - shown
    print(f"expired_token: login exit {cli.returncode} {took:.2f} s after the prompt: {err.strip()}")
    assert cli.returncode == 6, out + err
    assert "expired before it was approved" in err and "msso login" in err
    assert took < 5
    time.sleep(1.5)  # past the 1 s interval: no second poll comes
    assert len(polls(fake)) == 1
    assert [e["error"] for e in audit_entries(broker, "login")] == ["LoginDenied"]
    assert broker.msso("check").returncode == 2
    assert serving(broker)


# -- refresh against an IdP that cannot answer now ----------------------------------------------

TTL = 4  # seconds an access token lives at the short-lived IdP


@pytest.fixture(scope="module")
def short_lived_idp():
    provider = IdP(token_ttl=TTL)
    yield provider
    provider.cleanup()


REFRESH_FAULTS = {
    # fault: (Retry-After, the time no second refresh may come within, words of the sign's error)
    "429": (2, 1.9, "answered HTTP 429 (it asks to wait 2 s)"),
    "503": (None, 0.75, "answered HTTP 503"),
    "408": (None, 0.75, "answered HTTP 408"),
    "hang": (None, 0.75, "did not answer within 2 s"),
    "drip": (None, 0.75, "began to answer but did not finish within 2 s"),
}


@pytest.mark.parametrize("fault", REFRESH_FAULTS, ids=list(REFRESH_FAULTS))
def test_a_refresh_the_idp_cannot_answer_now_keeps_the_session(desktop, short_lived_idp, fault):
    """Attack: once the access token has run out, the IdP answers the refresh grant with 429
    (Retry-After: 2), 503, 408, not at all, or with a body dripped a byte a second (mssod
    --idp-timeout 2). Expected: `msso sign`
    fails with exit 5 and a sentence saying the session is kept; `msso check` still says valid;
    the IdP is not asked again before the backoff (the Retry-After, or about a second); once the
    IdP answers again `msso sign` works with a new token, and the session was never lost (no
    login in between, same login time)."""
    retry_after, quiet, words = REFRESH_FAULTS[fault]
    fake = FakeIdP(short_lived_idp)
    broker = Broker(desktop, fake, groups={GROUP: {"refresh_lead": "1s"}}, args=["--idp-timeout", "2"])
    try:
        assert broker.login().returncode == 0
        logged_in = time.monotonic()
        before = broker.status_json()
        first = broker.msso("sign", "--url", URL)
        assert first.returncode == 0
        fake.fail_refresh(fault, 1000, retry_after=retry_after)
        time.sleep(max(0.0, logged_in + TTL + 0.5 - time.monotonic()))  # the access token has run out

        if fault in ("hang", "drip"):
            # While the refresh hangs, others are served.
            signer = subprocess.Popen([BIN / "msso", "sign", "--url", URL], env=broker.env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)
            wait_for(lambda: fake.recorded(method="POST", path_suffix="/token", grant="refresh_token"),
                     what="the refresh to reach the IdP")
            check, took = timed_msso(broker, "check")
            print(f"refresh hung: check exit {check.returncode} in {took:.2f} s meanwhile")
            assert check.returncode == 0 and took < 1
            out, err = signer.communicate(timeout=15)
            failed = subprocess.CompletedProcess(signer.args, signer.returncode, out, err)
        else:
            failed = broker.msso("sign", "--url", URL)
        refreshes = fake.recorded(method="POST", path_suffix="/token", grant="refresh_token")
        print(f"refresh {fault}: sign exit {failed.returncode}: {failed.stderr.strip()}")
        assert failed.returncode == 5, failed.stdout + failed.stderr
        assert "the session is kept" in failed.stderr and words in failed.stderr, failed.stderr
        assert "Bearer" not in failed.stdout
        assert len(refreshes) == 1
        failed_at = time.monotonic()

        # Asking again at once: the same answer, from the backoff, without bothering the IdP.
        while time.monotonic() < failed_at + quiet - 0.3:
            again = broker.msso("sign", "--url", URL)
            assert again.returncode == 5 and "the session is kept" in again.stderr, again.stderr
            check = broker.msso("check")
            assert check.returncode == 0, "the session was lost: " + check.stdout + check.stderr
        refreshes = fake.recorded(method="POST", path_suffix="/token", grant="refresh_token")
        early = [round(r.time - failed_at, 2) for r in refreshes[1:] if r.time - failed_at < quiet]
        print(f"refresh {fault}: {len(refreshes)} refresh requests; any within {quiet} s of the failure: {early}")
        assert not early, "the IdP was asked again before the backoff"

        fake.release()
        deadline = time.monotonic() + 10
        while True:
            signed = broker.msso("sign", "--url", URL)
            if signed.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        recovered = time.monotonic() - failed_at
        print(f"refresh {fault}: sign works again {recovered:.2f} s after the failed one")
        assert signed.returncode == 0, signed.stderr
        token = signed.stdout.strip().split(" ", 2)[2]
        SECRETS.add(token)
        assert signed.stdout.strip() != first.stdout.strip(), "a new access token"
        after = broker.status_json()
        assert after["state"] == "valid" and after["loggedInAt"] == before["loggedInAt"]
        assert after["sessionExpiresAt"] == before["sessionExpiresAt"]
        assert len(fake.recorded(method="POST", path_suffix="/token", grant="password")) == 1, "a login in between"
        item = desktop.keyring_item()
        assert item is not None and item[1]["accessToken"] == token, "the refreshed token was stored"
        SECRETS.update([item[1]["accessToken"], item[1]["refreshToken"]])
        assert serving(broker)
    finally:
        broker.stop()
        fake.stop()


def timed_msso(broker, *argv):
    started = time.monotonic()
    done = broker.msso(*argv)
    return done, time.monotonic() - started


# -- what a refusal says --------------------------------------------------------------------------

OAUTH_REFUSALS = {
    # code: (exit status, words of the sentence)
    "unauthorized_client": (78, ["does not let client", "unauthorized_client", "the grant is not allowed for it"]),
    "access_denied": (6, ["denied the request to log in (access_denied)"]),
    "invalid_request": (6, ["refused to log in (invalid_request)"]),
    "server_says_no": (6, ["refused to log in (server_says_no)"]),
}


def test_a_firewalls_403_page_is_not_taken_for_a_wrong_password(broker, fake):
    """A 403 whose body is a page (a firewall or a proxy in the way), not the bare 403 glewlwyd
    refuses a user with: it said "the identity provider refused the username or password" (found
    by an outside attack), sending the user to retype a password that was never checked.
    Expected: a sentence naming the HTTP status the IdP's address answered, no word of the
    password."""
    fake.password_error = (403, "<html><body><h1>403 Forbidden</h1>Request blocked by the firewall</body></html>")
    done, took = login(broker)
    print(f"403 page: exit {done.returncode}: {done.stderr.strip()}")
    assert done.returncode != 0 and "HTTP 403" in done.stderr, done.stderr
    assert "username or password" not in done.stderr, done.stderr
    assert broker.alive()


@pytest.mark.parametrize("code", OAUTH_REFUSALS, ids=list(OAUTH_REFUSALS))
def test_an_oauth_refusal_names_its_cause_its_exit_status_and_the_providers_words(broker, fake, code):
    """The IdP answers the password login with an OAuth error and a description (holding an escape
    sequence). Expected: not "the identity provider is unreachable" (5): the exit status of the
    cause, a sentence saying what to do, and the provider's own words, control characters shown
    as `?` (an attack on the terminal otherwise)."""
    status, words = OAUTH_REFUSALS[code]
    fake.password_error = (400, {"error": code, "error_description": "Expected DPoP header,\x1b]0;pwned\x07 none found"})
    done, took = login(broker)
    print(f"{code}: exit {done.returncode}: {done.stderr.strip()}")
    assert done.returncode == status, done.stdout + done.stderr
    for word in words:
        assert word in done.stderr, done.stderr
    assert 'The identity provider said: "Expected DPoP header,?]0;pwned? none found"' in done.stderr
    assert "\x1b" not in done.stderr and "\x07" not in done.stderr
    assert broker.alive()


def test_a_provider_that_echoes_a_secret_in_its_words_does_not_make_msso_show_it(desktop, fake):
    """Found by an outside test: the provider's `error_description` is shown to the user and the
    apps (`OAuthError.said`), and a hostile one echoed the refresh token it was sent. Every secret
    a request sent (refresh token, password, client secret) is cut out of the words shown."""
    daemon = Broker(desktop, fake, groups={GROUP: {"refresh_lead": "3600s"}})
    try:
        fake.password_error = (400, {"error": "invalid_request", "error_description": "your password alice-pass is wrong"})
        refused = daemon.login()
        assert refused.returncode == 6 and "your password [a secret msso sent] is wrong" in refused.stderr, refused.stderr
        assert "alice-pass" not in refused.stderr
        fake.password_error = None
        assert daemon.login().returncode == 0
        import base64
        basic = base64.b64encode(f"msso:{secret_of(fake)}".encode()).decode()
        fake.refresh_answer = lambda form: (400, {"error": "invalid_request", "error_description":
                                                 f"no refresh for {form['refresh_token'][0]} of client {secret_of(fake)}"
                                                 f" (Basic {basic}, body {base64.b64encode(form['refresh_token'][0].encode()).decode()})"})
        # Every sign refreshes (refresh_lead); the token still works, so the sign is served, and
        # the refusal's words go to the log and to doctor's last outcome: none holds the secrets.
        token = desktop.keyring_item()[1]["refreshToken"]
        SECRETS.add(token)
        assert daemon.msso("sign", "--url", "https://api.example.com/x").returncode == 0
        assert daemon.logged("no refresh for [a secret msso sent] of client [a secret msso sent]") >= 1
        assert token not in daemon.log.read_text() and secret_of(fake) not in daemon.log.read_text()
        assert basic not in daemon.log.read_text() and daemon.logged("(Basic […], body […])") >= 1, "nor in base64 (a second outside test)"
    finally:
        daemon.stop()
