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


@pytest.mark.parametrize("plumbing", ["ReplyWriter(capacity: 1)", "JSONValue.null", "QuickValue.number(1)",
                                      "Methods.Sign.quickCall(serial: 1, SignRequest(group: nil, method: \"GET\", url: \"u\"))",
                                      "JSONString.literal(\"x\")", "Hex.random(digits: 2)"])
def test_the_brokers_plumbing_is_not_an_apps(tmp_path, plumbing):
    status, errors = typecheck(tmp_path, f"import MSSOClient\nlet _ = {plumbing}\n")
    assert status != 0
    name = plumbing.split("(")[0].split(".")[0]
    assert (f"cannot find '{name}' in scope" in errors
            or "'quickCall' is inaccessible due to 'package' protection level" in errors), errors
