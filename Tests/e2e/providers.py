"""Real OpenID Connect providers besides glewlwyd, for the interop tests (test_providers.py).

- `DjangoProviders`: django-oauth-toolkit and django-oidc-provider, two independent providers served
  by one Django site (django_op/serve.py) on 127.0.0.1: started once per run (about 3 s).
- `IdpyProvider`: idpyoidc behind a small Flask front (idpy_op/serve.py), started once per run.
- `Chromium`: Debian's chromium, headless, driven by selenium through Debian's chromedriver: a real
  browser on the providers' real login and consent pages.

Every client secret is recorded in harness.SECRETS. Requests of one's own, no msso (for
test_provider_minting.py): `Provider.token_request` (any grant, a list value sent repeated) and
`Provider.introspect` (RFC 7662; both providers', django-oauth-toolkit's at /o/introspect/);
`IdpyProvider.code_login` (a code grant through its login form, no browser) and
`IdpyProvider.exchange` (RFC 8693); `DjangoProviders.resource_server(name)`, the URL of a
resource server that checks a bound token's aud (RFC 8707).
"""
import base64
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, quote_plus, urlparse

import requests

from harness import PASSWORDS, SECRETS, free_port, wait_for

HERE = Path(__file__).resolve().parent
USERS = {"alice": {"password": PASSWORDS["alice"], "email": "alice@example.test", "first_name": "Alice",
                   "last_name": "Liddell"},
         "bob": {"password": PASSWORDS["bob"], "email": "bob@example.test", "first_name": "Bob"}}


@dataclass
class Provider:
    """One provider as msso sees it: its issuer, its clients (id → secret file), the group keys."""
    name: str                   # what and which version
    issuer: str
    password_client: str        # the client msso's password grant uses
    browser_client: str         # the client of the browser login (authorization code with PKCE)
    secret_files: dict = field(default_factory=dict)
    username: str = "alice"     # the display name its ID token yields (preferred_username, email, name, sub)
    revocation: bool = True     # whether it can revoke a refresh token at all
    scopes: tuple = ("openid", "email", "profile")
    redirect_uri: str = ""      # the loopback redirect registered for its browser client

    def group(self, flow="password", client=None, **overrides):
        client = client or (self.password_client if flow == "password" else self.browser_client)
        values = {"issuer": self.issuer, "client_id": client, "client_secret_file": str(self.secret_files[client]),
                  "scopes": list(self.scopes)}
        values.update(overrides)
        return values

    def secret(self, client):
        return Path(self.secret_files[client]).read_text()

    def discovery(self):
        return requests.get(f"{self.issuer}/.well-known/openid-configuration", timeout=5).json()

    def refresh(self, refresh_token, client=None):
        """The provider's own verdict on a refresh token: a refresh_token grant with it."""
        client = client or self.password_client
        return requests.post(self.discovery()["token_endpoint"], timeout=5,
                             data={"grant_type": "refresh_token", "refresh_token": refresh_token,
                                   "client_id": client, "client_secret": self.secret(client)})

    def userinfo(self, header):
        """The provider's verdict on an access token: its userinfo endpoint with msso's header."""
        name, _, value = header.partition(": ")
        return requests.get(self.discovery()["userinfo_endpoint"], headers={name: value}, timeout=5)

    def token_request(self, client=None, auth="post", **params):
        """A request of one's own at its token endpoint (the answer as it is): `client`'s
        credentials in the body (auth="post"), in a Basic header ("basic"), or none (None); a list
        value is sent as a repeated parameter (RFC 8707's `resource`)."""
        client = client or self.password_client
        data = list(params.items())
        headers = {}
        if auth == "post":
            data += [("client_id", client), ("client_secret", self.secret(client))]
        elif auth == "basic":
            headers["Authorization"] = basic(client, self.secret(client))
        data = [(key, each) for key, value in data for each in (value if isinstance(value, (list, tuple)) else [value])]
        return requests.post(self.discovery()["token_endpoint"], data=data, headers=headers, timeout=10)

    def introspect(self, token, client=None):
        """RFC 7662 introspection of a token, as `client` (Basic): the provider's JSON answer."""
        client = client or self.password_client
        answer = requests.post(self.introspection_endpoint, data={"token": token}, timeout=10,
                               headers={"Authorization": basic(client, self.secret(client))})
        assert answer.status_code == 200, (answer.status_code, answer.text)
        return answer.json()

    @property
    def introspection_endpoint(self):
        return self.discovery().get("introspection_endpoint") or f"{self.issuer}/introspect/"


def secret_files(directory, client_secrets):
    """Each client's secret in a file of its own (0600) under `directory`, as msso reads one."""
    files = {}
    for client, secret in client_secrets.items():
        files[client] = directory / f"{client}.secret"
        files[client].write_text(secret)
        files[client].chmod(0o600)
    return files


def basic(client, secret):
    """RFC 6749 §2.3.1: each form-encoded, then Basic."""
    return "Basic " + base64.b64encode(f"{quote_plus(client)}:{quote_plus(secret)}".encode()).decode()


def start_server(script, directory, spec, issuer):
    """Runs `script SPEC` with the test run's interpreter (the virtual environment that has the
    providers' packages) until its discovery answers; its requests are logged in DIR/server.log."""
    (directory / "spec.json").write_text(json.dumps(spec))
    with open(directory / "server.log", "w") as log:
        process = subprocess.Popen([sys.executable, script, directory / "spec.json"], stdout=log, stderr=log,
                                   start_new_session=True)

    def answers():
        try:
            return requests.get(f"{issuer}/.well-known/openid-configuration", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    try:
        wait_for(lambda: process.poll() is not None or answers(), timeout=60, interval=0.05, what=script.parent.name)
        assert process.poll() is None, f"{script} exited: {(directory / 'server.log').read_text()[-3000:]}"
    except BaseException:
        stop_server(process)
        raise
    return process


def stop_server(process):
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


class DjangoProviders:
    """django-oauth-toolkit (issuer /o) and django-oidc-provider (issuer /openid) on one port."""

    TOKEN_TTL = 4  # access tokens, seconds (both providers): the refresh tests wait this long

    def __init__(self, token_ttl=TOKEN_TTL, dot_settings=None):
        """`dot_settings`: more of django-oauth-toolkit's OAUTH2_PROVIDER settings, e.g.
        {"ROTATE_REFRESH_TOKEN": False} (a site of its own: its settings are the process's)."""
        self.dir = Path(tempfile.mkdtemp(prefix="msso-django-op-"))
        self.port = free_port()
        self.redirect_uri = f"http://127.0.0.1:{free_port()}/callback"  # registered for every browser client
        site = f"http://127.0.0.1:{self.port}"
        client_secrets = {"dot-password": secrets.token_urlsafe(24), "dot-browser": secrets.token_urlsafe(24),
                          "op-msso": secrets.token_hex(16),
                          # RFC 6749 §2.3.1 form-encodes these two in a Basic header: %2B and %2F
                          "op-plus": f"{secrets.token_hex(8)}+{secrets.token_hex(8)}/{secrets.token_hex(4)}="}
        SECRETS.update(client_secrets.values())
        files = secret_files(self.dir, client_secrets)
        spec = {"dir": str(self.dir), "port": self.port, "token_ttl": token_ttl, "users": USERS,
                "dot_settings": dot_settings or {},
                "dot": [{"client_id": "dot-password", "client_secret": client_secrets["dot-password"], "grant": "password"},
                        {"client_id": "dot-browser", "client_secret": client_secrets["dot-browser"],
                         "grant": "authorization-code", "redirect_uri": self.redirect_uri}],
                "op": [{"client_id": client, "client_secret": client_secrets[client], "redirect_uri": self.redirect_uri}
                       for client in ("op-msso", "op-plus")]}
        self.dot = Provider("django-oauth-toolkit 3.4.1", f"{site}/o", "dot-password", "dot-browser", files,
                            username="alice@example.test", redirect_uri=self.redirect_uri)
        self.op = Provider("django-oidc-provider 0.9.0", f"{site}/openid", "op-msso", "op-msso", files,
                           username="alice", revocation=False, redirect_uri=self.redirect_uri)
        try:
            self.process = start_server(HERE / "django_op" / "serve.py", self.dir, spec, self.dot.issuer)
            wait_for(lambda: requests.get(f"{self.op.issuer}/.well-known/openid-configuration", timeout=2).ok,
                     what="django-oidc-provider")
        except BaseException:
            self.cleanup()
            raise

    def resource_server(self, name):
        """The URL of a resource server of the site (django_op/op_site.py ResourceServer) that takes
        django-oauth-toolkit's access tokens, a token bound to resources (RFC 8707) only if this
        URL is one of them or under one."""
        return f"http://127.0.0.1:{self.port}/api/{name}/"

    def cleanup(self):
        if hasattr(self, "process"):
            stop_server(self.process)
        shutil.rmtree(self.dir, ignore_errors=True)


class IdpyProvider(Provider):
    """idpyoidc 5.0.0 on a port of its own: issuer http://127.0.0.1:PORT, clients "idpy-msso" (msso's)
    and "idpy-xchg", "idpy-peer" (the minting facts' own, test_provider_minting.py). RFC 8693 token
    exchange for every client, to the resources RESOURCES and audiences AUDIENCES only."""

    TOKEN_TTL = 4
    CLIENTS = ("idpy-msso", "idpy-xchg", "idpy-peer")
    RESOURCES = ("https://api.example.test/", "https://files.example.test/")
    AUDIENCES = ("api-example",)
    TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
    ACCESS_TOKEN = "urn:ietf:params:oauth:token-type:access_token"
    REFRESH_TOKEN = "urn:ietf:params:oauth:token-type:refresh_token"

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="msso-idpy-op-"))
        port = free_port()
        redirect_uri = f"http://127.0.0.1:{free_port()}/callback"
        client_secrets = {client: secrets.token_urlsafe(24) for client in self.CLIENTS}
        SECRETS.update(client_secrets.values())
        files = secret_files(self.dir, client_secrets)
        # Its ID tokens carry the claims of the scopes granted: with profile and not email, a name
        # and no preferred_username or email.
        super().__init__("idpyoidc 5.0.0", f"http://127.0.0.1:{port}", "idpy-msso", "idpy-msso",
                         files, username="Alice Liddell", revocation=False,
                         scopes=("openid", "profile"), redirect_uri=redirect_uri)
        spec = {"dir": str(self.dir), "port": port, "token_ttl": self.TOKEN_TTL, "users": USERS,
                "clients": [{"client_id": client, "client_secret": secret, "redirect_uri": redirect_uri}
                            for client, secret in client_secrets.items()],
                "exchange": {"resource": list(self.RESOURCES), "audience": list(self.AUDIENCES)}}
        try:
            self.process = start_server(HERE / "idpy_op" / "serve.py", self.dir, spec, self.issuer)
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise

    def cleanup(self):
        stop_server(self.process)
        shutil.rmtree(self.dir, ignore_errors=True)

    def code_login(self, client, user="alice", scopes=("openid", "profile", "offline_access")):
        """An authorization code grant with PKCE, its login form posted with `requests` (no browser):
        the token endpoint's JSON answer, recorded as secrets. With offline_access (and so
        prompt=consent, which it wants then) it issues a refresh token; its password grant works
        once per user and client, this as often as wanted."""
        session = requests.Session()
        verifier = secrets.token_urlsafe(48)
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        page = session.get(self.discovery()["authorization_endpoint"], timeout=10, params={
            "response_type": "code", "client_id": client, "redirect_uri": self.redirect_uri,
            "scope": " ".join(scopes), "state": secrets.token_hex(8), "nonce": secrets.token_hex(8),
            "code_challenge": challenge, "code_challenge_method": "S256",
            **({"prompt": "consent"} if "offline_access" in scopes else {})})
        assert page.status_code == 200, (page.status_code, page.text[:500])
        action = re.search(r'action="([^"]+)"', page.text).group(1)
        token = re.search(r'name="token" value="([^"]+)"', page.text).group(1)
        landed = session.post(requests.compat.urljoin(page.url, action), allow_redirects=False, timeout=10,
                              data={"token": token, "username": user, "password": PASSWORDS[user]})
        assert landed.status_code in (302, 303), (landed.status_code, landed.text[:500])
        code = parse_qs(urlparse(landed.headers["Location"]).query)["code"][0]
        answer = self.token_request(client, grant_type="authorization_code", code=code,
                                    redirect_uri=self.redirect_uri, code_verifier=verifier)
        assert answer.status_code == 200, (answer.status_code, answer.text)
        tokens = answer.json()
        SECRETS.update(tokens[name] for name in ("access_token", "refresh_token") if name in tokens)
        return tokens

    def exchange(self, subject_token, subject_token_type=None, client="idpy-xchg", auth="post", **params):
        """An RFC 8693 token exchange (the answer as it is); subject_token_type defaults to
        an access token's; its answer's token is recorded as a secret."""
        answer = self.token_request(client, auth, grant_type=self.TOKEN_EXCHANGE, subject_token=subject_token,
                                    subject_token_type=subject_token_type or self.ACCESS_TOKEN, **params)
        if answer.headers.get("Content-Type", "").startswith("application/json"):
            SECRETS.update(value for key, value in answer.json().items() if key in ("access_token", "refresh_token"))
        return answer


class Chromium:
    """One headless chromium for the run; each login starts with no cookies (no provider session)."""

    def __init__(self):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                         "--no-first-run", "--disable-extensions", "--password-store=basic"):
            options.add_argument(argument)
        self.profile = tempfile.mkdtemp(prefix="msso-chromium-")
        options.add_argument(f"--user-data-dir={self.profile}")
        # Debian's chromedriver, named: selenium would otherwise try to download one.
        self.driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
        self.driver.set_page_load_timeout(30)

    def login(self, url, user="alice", password=None, approve=True):
        """What the user does: open msso's address, sign in on the provider's page, approve (or
        decline) on its consent page; returns the text of the page the browser lands on."""
        from selenium.common.exceptions import TimeoutException
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support import expected_conditions as until
        from selenium.webdriver.support.ui import WebDriverWait

        redirect_uri = parse_qs(urlparse(url).query)["redirect_uri"][0]  # msso's loopback listener
        driver = self.driver
        driver.execute_cdp_cmd("Network.clearBrowserCookies", {})
        driver.get(url)
        wait = WebDriverWait(driver, 20)
        try:
            # get() returns once the page (after the provider's redirects) has loaded.
            WebDriverWait(driver, 5).until(until.presence_of_element_located((By.ID, "username"))).send_keys(user)
        except TimeoutException:
            raise AssertionError(f"no login page at {driver.current_url[:200]}: the provider says "
                                 f"{driver.find_element(By.TAG_NAME, 'body').text[:500]!r}") from None
        driver.find_element(By.ID, "password").send_keys(password or PASSWORDS[user])
        driver.find_element(By.ID, "sign-in").click()
        landed = lambda d: d.current_url.startswith(redirect_uri) and d.find_element(By.TAG_NAME, "body").text
        consent = "input[name=allow]" if approve else "input[type=submit]:not([name=allow])"
        # A consent page (django-oauth-toolkit, django-oidc-provider), or none (idpyoidc).
        wait.until(lambda d: landed(d) or d.find_elements(By.CSS_SELECTOR, consent))
        if not landed(driver):
            driver.find_element(By.CSS_SELECTOR, consent).click()
            wait.until(landed)
        return driver.find_element(By.TAG_NAME, "body").text

    def cleanup(self):
        self.driver.quit()
        shutil.rmtree(self.profile, ignore_errors=True)
