"""What an app written in Swift sees of the library (`import MSSOClient`): the methods, their
arguments and results, the errors; not the broker's own plumbing (the hand-written JSON reader and
writer the commands and the daemon share), which is `package` access. Typechecked with the same
compiler against the tests' build, as an app outside this package would be."""
import shutil
import subprocess

import pytest

from harness import BIN, ROOT

SWIFTC = shutil.which("swiftc") or "/opt/swift/usr/bin/swiftc"


def typecheck(tmp_path, source):
    app = tmp_path / "app.swift"
    app.write_text(source)
    modulemap = BIN / "CMSSOSystem.build" / "module.modulemap"
    done = subprocess.run([SWIFTC, "-typecheck", "-I", BIN / "Modules", "-Xcc", f"-fmodule-map-file={modulemap}",
                           "-module-name", "SomeApp", app], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    return done.returncode, done.stderr


@pytest.fixture(autouse=True)
def built():
    if not (BIN / "Modules" / "MSSOClient.swiftmodule").exists():
        pytest.skip(f"no Swift build at {BIN}")


def test_an_app_signs_with_the_public_api(tmp_path):
    status, errors = typecheck(tmp_path, """
import MSSOClient
func headers(_ client: SSOClient) async throws -> [Header] {
    do {
        return try await client.sign(method: "GET", url: "https://api.example.com/", group: "suite")
    } catch let error as BrokerError {
        print(error.name, error.message)
        throw error
    }
}
let _ = SignRequest(group: "suite", method: "GET", url: "https://api.example.com/")
let _: Methods.Sign.Type = Methods.Sign.self
""")
    assert status == 0, errors


def test_an_app_acts_as_an_account_of_the_group(tmp_path):
    status, errors = typecheck(tmp_path, r"""
import MSSOClient
func admin() async throws -> [String] {
    let sso = try await SSOClient.connect(account: "admin")   // else $MSSO_ACCOUNT
    let mine: String? = sso.account
    _ = try await sso.sign(method: "GET", url: "https://api.example.com/", group: "suite", account: "sandbox")
    _ = try await sso.token(account: "sandbox", resource: "https://api.example.com/")
    let session = try await sso.check(group: "suite")
    let every = try await sso.status(group: "suite")          // every account; `account:` names one
    _ = try await sso.events(groups: ["suite"], account: mine)
    let ended = try await sso.call(Methods.Logout.self, .init(group: "suite", account: "admin"))
    return [session.account ?? "", "\(session.isDefault == true)", "\(every.count)"] + (ended.sessions ?? []).map(\.account)
        + (ended.notRevoked ?? []).compactMap(\.account)
}
""")
    assert status == 0, errors


@pytest.mark.parametrize("plumbing", ["ReplyWriter(capacity: 1)", "JSONValue.null", "QuickValue.number(1)",
                                      "Methods.Sign.quickCall(serial: 1, SignRequest(group: nil, method: \"GET\", url: \"u\"))",
                                      "JSONString.literal(\"x\")", "Hex.random(digits: 2)"])
def test_the_brokers_plumbing_is_not_an_apps(tmp_path, plumbing):
    status, errors = typecheck(tmp_path, f"import MSSOClient\nlet _ = {plumbing}\n")
    assert status != 0
    name = plumbing.split("(")[0].split(".")[0]
    assert (f"cannot find '{name}' in scope" in errors
            or "'quickCall' is inaccessible due to 'package' protection level" in errors), errors


def test_a_refusal_that_asks_for_a_password_comes_back_as_the_401_it_is(desktop, idp):  # noqa: F811
    """A server refusing a token with `401` and `WWW-Authenticate: Basic` (git servers and
    registries do) left an app's `SSOClient.data(for:)` waiting forever: swift-corelibs-foundation
    before Swift 6.3.2 never ends a task whose password challenge has no credential (found by a
    helper's test through App1). Expected: App1 prints the 401 and exits, within its timeout."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from harness import Broker

    class Refuses(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = b"who are you?"
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Refuses)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    daemon = Broker(desktop, idp)
    try:
        assert daemon.login().returncode == 0
        done = subprocess.run([BIN / "App1", "fetch", f"http://127.0.0.1:{server.server_port}/repo.git"], env=daemon.env,
                              capture_output=True, text=True, timeout=30)
        assert "-> 401" in done.stdout, (done.stdout, done.stderr)  # (App1 exits 1 on a refusal)
    finally:
        daemon.stop()
        server.shutdown()
