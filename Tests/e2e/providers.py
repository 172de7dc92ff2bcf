"""Real OpenID Connect providers besides glewlwyd, for the interop tests (test_providers.py).

- `DjangoProviders`: django-oauth-toolkit and django-oidc-provider, two independent providers served
  by one Django site (django_op/serve.py) on 127.0.0.1: started once per run (about 3 s).
- `IdpyProvider`: idpyoidc behind a small Flask front (idpy_op/serve.py), started once per run.
- `Chromium`: Debian's chromium, headless, driven by selenium through Debian's chromedriver: a real
  browser on the providers' real login and consent pages.

Every client secret is recorded in harness.SECRETS.
"""
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlparse

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

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="msso-django-op-"))
        self.port = free_port()
        self.redirect_uri = f"http://127.0.0.1:{free_port()}/callback"  # registered for every browser client
        site = f"http://127.0.0.1:{self.port}"
        client_secrets = {"dot-password": secrets.token_urlsafe(24), "dot-browser": secrets.token_urlsafe(24),
                          "op-msso": secrets.token_hex(16),
                          # RFC 6749 §2.3.1 form-encodes these two in a Basic header: %2B and %2F
                          "op-plus": f"{secrets.token_hex(8)}+{secrets.token_hex(8)}/{secrets.token_hex(4)}="}
        SECRETS.update(client_secrets.values())
        files = {}
        for client, secret in client_secrets.items():
            files[client] = self.dir / f"{client}.secret"
            files[client].write_text(secret)
            files[client].chmod(0o600)
        spec = {"dir": str(self.dir), "port": self.port, "token_ttl": self.TOKEN_TTL, "users": USERS,
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

    def cleanup(self):
        if hasattr(self, "process"):
            stop_server(self.process)
        shutil.rmtree(self.dir, ignore_errors=True)


class IdpyProvider(Provider):
    """idpyoidc 5.0.0 on a port of its own: issuer http://127.0.0.1:PORT, one client "idpy-msso"."""

    TOKEN_TTL = 4

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="msso-idpy-op-"))
        port = free_port()
        redirect_uri = f"http://127.0.0.1:{free_port()}/callback"
        secret = secrets.token_urlsafe(24)
        SECRETS.add(secret)
        secret_file = self.dir / "idpy-msso.secret"
        secret_file.write_text(secret)
        secret_file.chmod(0o600)
        # Its ID tokens carry the claims of the scopes granted: with profile and not email, a name
        # and no preferred_username or email.
        super().__init__("idpyoidc 5.0.0", f"http://127.0.0.1:{port}", "idpy-msso", "idpy-msso",
                         {"idpy-msso": secret_file}, username="Alice Liddell", revocation=False,
                         scopes=("openid", "profile"), redirect_uri=redirect_uri)
        spec = {"dir": str(self.dir), "port": port, "token_ttl": self.TOKEN_TTL, "users": USERS,
                "clients": [{"client_id": "idpy-msso", "client_secret": secret, "redirect_uri": redirect_uri}]}
        try:
            self.process = start_server(HERE / "idpy_op" / "serve.py", self.dir, spec, self.issuer)
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise

    def cleanup(self):
        stop_server(self.process)
        shutil.rmtree(self.dir, ignore_errors=True)


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
