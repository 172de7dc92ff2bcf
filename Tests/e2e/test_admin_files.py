"""The administrator's groups and policy come from the administrator's files alone.

The adversary is a program running as the user, which controls the user's config.toml, apps.d and
mssod's environment (the systemd user environment is the user's to set), but not /etc/msso:

- a user's group naming an administrator's issuer, with a CA and a proxy of the user's choosing,
  must not change where the administrator's group sends the login password and the client secret
  (the discovery document is cached per route, not per issuer; an admin group takes no proxy
  from the environment);
- `MSSO_CONFIG` replaces the user's config.toml only: `[policy]` stays the administrator's.
"""
import datetime
import http.client
import http.server
import json
import socket
import socketserver
import ssl
import threading

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from harness import BIN, GROUP, PASSWORDS, SECRETS, Broker, wait_for

ADMIN_GROUP = "com.example.corp"
USER_GROUP = "com.example.mine"
URL = "https://api.example.com/items"


# --- certificates -----------------------------------------------------------------------------

def certificate(name, key, issuer_name, issuer_key, ca):
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
               .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer_name)]))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                                      data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                                      crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
    else:
        builder = (builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False))
    return builder.sign(issuer_key, hashes.SHA256())


def authority(directory, name, host):
    """A CA (its certificate in DIR/NAME-ca.pem) and a server certificate for `host`:
    returns (CA file, TLS server context)."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = certificate(f"{name} CA", ca_key, f"{name} CA", ca_key, ca=True)
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = certificate(host, key, f"{name} CA", ca_key, ca=False)
    ca_file = directory / f"{name}-ca.pem"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    chain, key_file = directory / f"{name}-server.pem", directory / f"{name}-server.key"
    chain.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(chain, key_file)
    return ca_file, context


def network_name():
    """A host name of this machine that is not `localhost` (loopback names and addresses are never
    proxied, so they cannot show a proxy's part), with the address it resolves to: the tests'
    stand-in for an IdP on the network. (With an IP literal, AsyncHTTPClient closed the TLS
    tunnel through the proxy before its ClientHello, here; and an IdP has a name anyway.)"""
    name = socket.gethostname()
    if not name or name == "localhost" or "." in name and name.replace(".", "").isdigit():
        return None
    try:
        return name, socket.gethostbyname(name)
    except OSError:
        return None


# --- the parts: the real IdP behind TLS, the user's proxy, the attacker's token endpoint -------

class Recorder:
    def __init__(self):
        self.lock = threading.Lock()
        self.items = []

    def add(self, item):
        with self.lock:
            self.items.append(item)

    def snapshot(self):
        with self.lock:
            return list(self.items)


class TLSFront:
    """glewlwyd (the real IdP) served over TLS at https://HOST:PORT, as an IdP on the network
    is: every request is passed to glewlwyd, its own URL rewritten to the front's in answers. Its
    token answers lose their `id_token`, which glewlwyd signed for its own issuer, not the front's
    (msso rightly refuses it; ID tokens are tested with glewlwyd itself)."""

    def __init__(self, idp, host, address, context):
        self.requests = Recorder()
        backend = idp.issuer.split("/api/")[0]  # http://127.0.0.1:PORT
        backend_port = int(backend.rsplit(":", 1)[1])
        front = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.forward()

            def do_POST(self):
                self.forward()

            def forward(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                front.requests.add(f"{self.command} {self.path}")
                upstream = http.client.HTTPConnection("127.0.0.1", backend_port, timeout=10)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection", "content-length")}
                upstream.request(self.command, self.path, body=body or None, headers=headers)
                answer = upstream.getresponse()
                data = answer.read()
                for old, new in ((backend, front.url), (backend.replace("/", "\\/"), front.url.replace("/", "\\/"))):
                    data = data.replace(old.encode(), new.encode())
                if self.path.split("?")[0].endswith("/token") and answer.status == 200:
                    data = json.dumps({k: v for k, v in json.loads(data).items() if k != "id_token"}).encode()
                self.send_response(answer.status)
                for name, value in answer.getheaders():
                    if name.lower() not in ("content-length", "connection", "transfer-encoding", "date", "server"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data)
                upstream.close()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer((address, 0), Handler)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://{host}:{self.server.server_address[1]}"
        self.issuer = self.url + "/api/oidc"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


class InterceptingProxy:
    """The user's `https_proxy`: records every CONNECT, then plays the IdP with the attacker's
    certificate, answering discovery with a document whose token endpoint is the attacker's own
    (plain http on loopback is allowed there). Every request it or that endpoint receives is
    recorded, bytes and all."""

    def __init__(self, issuer, context):
        self.connects = Recorder()
        self.stolen = Recorder()  # everything the attacker's servers received
        proxy = self

        class Token(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                proxy.stolen.add(f"POST {self.path}\n{self.headers}\n{body.decode(errors='replace')}")
                answer = b'{"error": "invalid_grant"}'
                self.send_response(400)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass

        self.token_server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Token)
        token_endpoint = f"http://127.0.0.1:{self.token_server.server_address[1]}/token"
        document = json.dumps({"issuer": issuer, "token_endpoint": token_endpoint,
                               "device_authorization_endpoint": token_endpoint}).encode()

        class Tunnel(socketserver.StreamRequestHandler):
            def handle(self):
                request_line = self.rfile.readline().decode(errors="replace").strip()
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                method, target = (request_line.split() + ["", ""])[:2]
                proxy.connects.add(target if method == "CONNECT" else request_line)
                if method != "CONNECT":
                    return
                self.connection.sendall(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                try:
                    tls = context.wrap_socket(self.connection, server_side=True)
                except (ssl.SSLError, OSError) as error:
                    proxy.connects.add(f"TLS failed: {error}")
                    return  # a client that does not trust the attacker's CA
                stream = tls.makefile("rb")
                head = stream.readline().decode(errors="replace")
                length = 0
                while (line := stream.readline()) not in (b"\r\n", b"\n", b""):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = stream.read(length) if length else b""
                proxy.stolen.add(f"{head.strip()} (through the proxy)\n{body.decode(errors='replace')}")
                answer = document if "/.well-known/openid-configuration" in head else b'{"error": "invalid_grant"}'
                status = b"200 OK" if answer is document else b"400 Bad Request"
                tls.sendall(b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\nContent-Length: "
                            + str(len(answer)).encode() + b"\r\nConnection: close\r\n\r\n" + answer)
                tls.close()

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Tunnel)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        for server in (self.server, self.token_server):
            threading.Thread(target=server.serve_forever, daemon=True).start()

    def stop(self):
        for server in (self.server, self.token_server):
            server.shutdown()
            server.server_close()


@pytest.fixture
def network_idp(idp, tmp_path):
    found = network_name()
    if found is None:
        pytest.skip("needs a host name of this machine other than localhost")
    host, address = found
    admin_ca, admin_tls = authority(tmp_path, "corp", host)
    attacker_ca, attacker_tls = authority(tmp_path, "attacker", host)
    front = TLSFront(idp, host, address, admin_tls)
    proxy = InterceptingProxy(front.issuer, attacker_tls)
    try:
        yield front, proxy, admin_ca, attacker_ca
    finally:
        proxy.stop()
        front.stop()


def test_a_users_group_with_an_admins_issuer_a_hostile_ca_and_proxy_cannot_divert_the_admins_login(desktop, idp, network_idp):
    """The audit's discovery poisoning: the user's config.toml adds a group with the issuer of an
    administrator's group and the attacker's CA, and mssod's environment has https_proxy at the
    attacker's intercepting proxy. After `msso login --group <user's group>`, the administrator's
    group's password login still goes to the real IdP, and nothing of it reaches the attacker."""
    front, proxy, admin_ca, attacker_ca = network_idp
    broker = Broker(desktop, idp, groups={ADMIN_GROUP: {}}, start=False, environment={"https_proxy": proxy.url})
    try:
        ca_file = broker.admin_dir / "corp-ca.pem"  # the administrator's, as /etc/msso/corp-ca.pem would be
        ca_file.write_bytes(admin_ca.read_bytes())
        broker.write_config({ADMIN_GROUP: {"issuer": front.issuer, "ca_file": str(ca_file)}}, idp)
        broker.user_dir.mkdir(parents=True, exist_ok=True)
        (broker.user_dir / "config.toml").write_text(
            f'[groups."{USER_GROUP}"]\nissuer = {json.dumps(front.issuer)}\nclient_id = "msso"\n'
            f'client_secret = "the-attackers-own"\nca_file = {json.dumps(str(attacker_ca))}\n')
        desktop.chown(desktop.home / ".config", recursive=True)
        broker.start()

        # The user's group goes through the environment's proxy, as curl would, and trusts the
        # attacker's CA: its login meets the attacker.
        mine = broker.msso("login", "--group", USER_GROUP, "--username", "alice", "--password-stdin", input="a-guess\n")
        assert mine.returncode == 6 and "refused the username or password" in mine.stderr, mine.stdout + mine.stderr
        assert front.url.split("//")[1] in proxy.connects.snapshot(), "the user's group used https_proxy"
        assert any("password=a-guess" in item for item in proxy.stolen.snapshot()), "and the attacker's document"
        connects, stolen = len(proxy.connects.snapshot()), len(proxy.stolen.snapshot())

        # The administrator's group: a password login, as at session start.
        corp = broker.login(group=ADMIN_GROUP)
        assert corp.returncode == 0, f"{corp.stderr.strip()}; the attacker received: {proxy.stolen.snapshot()[stolen:]}"
        assert broker.msso("check", "--group", ADMIN_GROUP).returncode == 0, "its session is valid"
        assert "POST /api/oidc/token" in front.requests.snapshot(), "the login went to the real IdP"
        assert len(proxy.connects.snapshot()) == connects, f"the admin's group went through the user's proxy: {proxy.connects.snapshot()}"
        assert len(proxy.stolen.snapshot()) == stolen, f"the attacker received: {proxy.stolen.snapshot()[stolen:]}"
        everything = "\n".join(proxy.stolen.snapshot())
        assert PASSWORDS["alice"] not in everything and idp.secret_file.read_text() not in everything
    finally:
        broker.stop()


def test_the_environment_reaches_none_of_an_identity_providers_tls(desktop, idp, network_idp):
    """libcurl and the TLS libraries under it read variables the user's environment (and so malware
    of the user's) can set for mssod: SSLKEYLOGFILE writes every TLS secret to a file, and
    GNUTLS_DEBUG_LEVEL logs each connection's keys to stderr (with a proxy or a capture on the
    way, the password, the refresh token and the client secret are then read off the wire), SSL_CERT_FILE
    and SSL_CERT_DIR add trust anchors. mssod clears them as it starts: an administrator's group
    still logs in over its own `ca_file` and no secret is logged; a group that trusts the system's
    store does not trust the CA the environment names."""
    front, _, admin_ca, _ = network_idp
    keys = desktop.home / "tls-keys.log"
    anchors = desktop.home / "anchors"
    anchors.mkdir()
    (anchors / "corp-ca.pem").write_bytes(admin_ca.read_bytes())
    desktop.chown(anchors, recursive=True)
    broker = Broker(desktop, idp, groups={ADMIN_GROUP: {}}, start=False,
                    environment={"SSLKEYLOGFILE": str(keys), "SSL_CERT_FILE": str(anchors / "corp-ca.pem"),
                                 "SSL_CERT_DIR": str(anchors), "GNUTLS_DEBUG_LEVEL": "99"})
    try:
        ca_file = broker.admin_dir / "corp-ca.pem"
        ca_file.write_bytes(admin_ca.read_bytes())
        broker.write_config({ADMIN_GROUP: {"issuer": front.issuer, "ca_file": str(ca_file)},
                             USER_GROUP: {"issuer": front.issuer}}, idp)
        broker.register("both", [BIN / "msso"], [ADMIN_GROUP, USER_GROUP])
        broker.start()

        corp = broker.login(group=ADMIN_GROUP)
        assert corp.returncode == 0, corp.stderr
        assert "POST /api/oidc/token" in front.requests.snapshot(), "the login went over TLS to the IdP"
        assert not keys.exists(), f"TLS secrets written to {keys}: {keys.read_text()[:200]}"
        # (mssod loads no TLS library; mssod-idp, which does, starts with an empty environment.)
        assert "WRITE KEY" not in broker.log.read_text(), "GnuTLS's debug log (each connection's keys) in mssod's stderr"

        system = broker.login(group=USER_GROUP)
        assert system.returncode != 0 and "could not be trusted" in system.stderr and "ca_file" in system.stderr, \
            f"a group on the system's store trusted the environment's CA: {system.stdout + system.stderr}"
        assert "network" not in system.stderr, "an untrusted certificate is not the network's fault"
        assert broker.msso("check", "--group", USER_GROUP).returncode != 0
        assert not keys.exists()
    finally:
        broker.stop()


def test_msso_config_replaces_only_the_users_file_so_the_admins_policy_stands(desktop, idp):
    """`MSSO_CONFIG=<the user's file>` in mssod's environment used to replace the administrator's
    config.toml too, dropping `[policy] user_apps = false`: the user's own registration then got
    tokens. Now the administrator's files are read whatever MSSO_CONFIG says."""
    broker = Broker(desktop, idp, register=False, start=False)
    try:
        broker.config.write_text(broker.config.read_text() + "\n[policy]\nuser_apps = false\n")
        mine = desktop.home / "mine.toml"
        mine.write_text(f'[groups."{USER_GROUP}"]\nissuer = {json.dumps(idp.issuer)}\nclient_id = "msso"\n'
                        f'client_secret_file = {json.dumps(str(idp.secret_file))}\nscopes = ["openid", "app1"]\n')
        desktop.chown(mine)
        broker.register("mine", [BIN / "msso"], [GROUP, USER_GROUP], admin=False)
        broker.environment["MSSO_CONFIG"] = str(mine)
        broker.start()

        status = broker.msso("status")
        assert GROUP in status.stdout and USER_GROUP in status.stdout, status.stdout + status.stderr
        assert broker.login(group=USER_GROUP).returncode == 0
        refused = broker.msso("sign", "--group", USER_GROUP, "--url", URL)
        assert refused.returncode == 7, refused.stdout + refused.stderr
        assert f'is not registered for access group "{USER_GROUP}"' in refused.stderr
        assert broker.msso("token", "--group", USER_GROUP).returncode == 7
        allow = broker.msso("apps", "allow", BIN / "msso", "--group", USER_GROUP)
        assert allow.returncode == 7 and "does not allow user app registrations" in allow.stderr
    finally:
        broker.stop()


def test_a_users_group_whose_name_ends_in_a_nul_is_refused_not_merged_with_the_admins(desktop, idp):
    """Outside attack: keyring attributes are C strings, so a user's group "adm\\0" named the
    keyring item of the administrator's "adm": its token was handed out to an app registered only
    for the user's group, and a login there replaced the admin's session. The file is refused
    whole, saying why; the admin's session is untouched."""
    broker = Broker(desktop, idp, groups={ADMIN_GROUP: {}})
    try:
        assert broker.login(group=ADMIN_GROUP).returncode == 0
        _, before = desktop.keyring_item(group=ADMIN_GROUP)
        broker.user_dir.mkdir(parents=True, exist_ok=True)
        (broker.user_dir / "config.toml").write_text(
            f'[groups."{ADMIN_GROUP}\\u0000"]\nissuer = {json.dumps(idp.issuer)}\nclient_id = "msso"\n'
            f'client_secret_file = {json.dumps(str(idp.secret_file))}\n')
        desktop.chown(desktop.home / ".config", recursive=True)
        broker.stop()
        broker.start(wait=False)
        broker.process.wait(timeout=30)
        log = broker.log.read_text()
        assert broker.process.returncode != 0 and "a NUL character (\\u0000) is not allowed" in log, log[-1500:]
        assert desktop.keyring_item(group=ADMIN_GROUP)[1] == before, "the administrator's session is as it was"
    finally:
        broker.stop()
