"""The wire's constants and names have one definition, protocol/names.json, and every language's
copy of them is what scripts/generate-names makes of it: the check fails when the definition is
edited without regenerating, or a copy is edited by hand. What is written by hand around them
(the libraries' calls, docs/PROTOCOL.md's prose) is held to the definition here too. No daemon:
each edit is made in a scratch copy of the files concerned (the script's --root)."""
import json
import re
import shutil
import subprocess
import sys

import pytest

from harness import ROOT
from wire_names import definition, exit_statuses

SCRIPT = ROOT / "scripts" / "generate-names"
DEFINITION = "protocol/names.json"
# Every file the script writes, whole or in regions (its COPIES).
COPIES = ["Sources/MSSOProtocol/WireNames.swift", "Sources/MSSOClient/ExitStatus.swift",
          "Sources/MSSOClient/SSOClient.swift", "clients/c/msso_protocol.h", "clients/python/src/msso/errors.py",
          "clients/python/src/msso/_wire.py", "clients/go/names.go", "docs/PROTOCOL.md"]


def generate(root, *args):
    return subprocess.run([sys.executable, SCRIPT, "--root", root, *args], capture_output=True, text=True, timeout=60)


def stale(done):
    """The copies a failed --check named."""
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    return set(re.findall(rf"^(\S+) is not what {re.escape(DEFINITION)} makes", done.stderr, re.M))


@pytest.fixture
def scratch(tmp_path):
    for path in [DEFINITION, *COPIES]:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / path, tmp_path / path)
    return tmp_path


def edit(root, path, old, new):
    text = (root / path).read_text()
    assert old in text, (path, old)
    (root / path).write_text(text.replace(old, new, 1))


def test_the_checked_in_copies_are_what_the_definition_makes():
    done = generate(ROOT, "--check")
    assert done.returncode == 0, done.stderr
    # Each copy says it is generated, and from what.
    for path in COPIES:
        assert "by scripts/generate-names from protocol/names.json" in (ROOT / path).read_text(), path
    assert (ROOT / "clients/go/names.go").read_text().startswith("// Code generated ")  # Go's own marker


def test_the_definition_reads_as_the_libraries_expect():
    names = definition()
    statuses = exit_statuses()
    assert len(statuses) >= 21 and statuses["NotLoggedIn"] == 2 and statuses["Internal"] == 70
    assert statuses["BrokerUnreachable"] == statuses["Busy"] == statuses["TimedOut"] == 3
    assert [e["status"] for e in names["exitStatuses"]] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 64, 70, 73, 78]
    assert [s["name"] for s in names["sessionStates"]] == ["valid", "expired", "notLoggedIn", "corrupt"]
    # libmsso's error codes follow the definition's order: these first ones are ABI.
    assert [e["name"] for e in names["errors"]][:3] == ["NotLoggedIn", "Expired", "Corrupt"]
    assert names["protocolVersion"]["value"] == 1 and names["maxFrame"]["value"] == 65536
    assert [m["name"] for m in names["methods"]] == [
        "hello", "ping", "login", "extend", "logout", "status", "check", "sign", "token", "subscribe", "apps", "audit",
        "keys", "lock", "unlock", "diagnose", "forward"]


def test_the_libraries_call_only_the_definitions_methods():
    methods = {m["name"] for m in definition()["methods"]}
    # Python keeps the names as literals, for reading: each is one of the definition's.
    python = ROOT / "clients/python/src/msso"
    called = set()
    for name in ("client.py", "aio.py"):
        text = (python / name).read_text()
        called |= set(re.findall(r'(?:_verb\(|_call\(writer, |frame\(serial, |method == )"(\w+)"', text))
    assert called <= methods and {"hello", "sign", "subscribe", "diagnose"} <= called, called - methods
    # Go and C name them by the generated constants: no call is begun with a string.
    go = ROOT / "clients/go"
    for path in go.glob("*.go"):
        if not path.name.endswith("_test.go"):
            assert not re.search(r'(?:\.Call|\.call|\.session|\.lock|\.roundTrip)\(ctx, "', path.read_text()), path
    assert "cn.roundTrip(ctx, methodHello," in (go / "client.go").read_text()
    client_c = (ROOT / "clients/c/src/client.c").read_text()
    assert not re.search(r'(?:\bcall\(c|frame_begin\([^;]*), "', client_c)
    assert "call(c, MSSO_METHOD_SIGN," in client_c


def test_the_protocol_document_states_the_definitions_constants():
    names = definition()
    doc = (ROOT / "docs/PROTOCOL.md").read_text()
    version, cap = names["protocolVersion"]["value"], names["maxFrame"]["value"]
    assert doc.startswith(f"# The msso wire protocol, version {version}\n")
    assert f"(this document: {version})" in doc
    assert f'"method": "hello", "args": {{"version": {version},' in doc
    assert f"must be at most **{cap}**" in doc
    # The methods table (written by hand, for its arguments and results) has a row for each method.
    table = doc[doc.index("| method | args | result |"):]
    table = table[:table.index("\n\n")]
    assert sorted(re.findall(r"^\| `(\w+)` \|", table, re.M)) == sorted(m["name"] for m in names["methods"])


def test_an_edited_definition_fails_the_check_until_it_is_regenerated(scratch):
    assert generate(scratch, "--check").returncode == 0
    names = json.loads((scratch / DEFINITION).read_text())
    names["errors"].append({"name": "SomethingNew", "swift": "somethingNew", "c": "SOMETHING_NEW", "exit": "refused",
                            "doc": "A newer failure.", "protocol": "a newer failure"})
    (scratch / DEFINITION).write_text(json.dumps(names, indent=2))
    # Every copy that lists the errors is stale; the states, signals and event kinds are not.
    assert stale(generate(scratch, "--check")) == {
        "Sources/MSSOProtocol/WireNames.swift", "Sources/MSSOClient/ExitStatus.swift", "clients/c/msso_protocol.h",
        "clients/python/src/msso/errors.py", "clients/go/names.go", "docs/PROTOCOL.md"}
    done = generate(scratch)
    assert done.returncode == 0, done.stderr
    assert generate(scratch, "--check").returncode == 0
    assert 'X(SOMETHING_NEW, "SomethingNew", 6)' in (scratch / "clients/c/msso_protocol.h").read_text()
    assert "case .invalidCredentials, .loginDenied, .resourceRefused, .somethingNew: self = .refused" in \
        (scratch / "Sources/MSSOClient/ExitStatus.swift").read_text()
    assert 'class SomethingNew(MSSOError):' in (scratch / "clients/python/src/msso/errors.py").read_text()
    assert '"SomethingNew",' in (scratch / "clients/python/src/msso/errors.py").read_text()  # in __all__
    assert 'ErrSomethingNew = &Error{Name: "SomethingNew"}' in (scratch / "clients/go/names.go").read_text()
    assert "| `SomethingNew` | a newer failure | 6 |" in (scratch / "docs/PROTOCOL.md").read_text()

    # A new signal of a group: the Swift event kinds and the Go constants follow.
    names["signals"].insert(3, {"name": "Renamed", "swift": "renamed", "c": "RENAMED", "group": True,
                                "doc": "A group was renamed.", "protocol": "the group was renamed"})
    (scratch / DEFINITION).write_text(json.dumps(names, indent=2))
    assert "Sources/MSSOClient/SSOClient.swift" in stale(generate(scratch, "--check"))
    assert generate(scratch).returncode == 0
    assert re.search(r'\tEventRenamed += "Renamed" +// the group was renamed', (scratch / "clients/go/names.go").read_text())


def test_a_new_method_or_frame_cap_goes_to_every_copy_that_has_them(scratch):
    names = json.loads((scratch / DEFINITION).read_text())
    names["methods"].append({"name": "rename", "swift": "Rename", "c": "RENAME", "go": "methodRename",
                             "doc": "Renames a group."})
    (scratch / DEFINITION).write_text(json.dumps(names, indent=2))
    assert stale(generate(scratch, "--check")) == {
        "Sources/MSSOProtocol/WireNames.swift", "clients/c/msso_protocol.h", "clients/go/names.go"}
    assert generate(scratch).returncode == 0
    assert 'extension Methods.Rename { public static let name = "rename" }' in \
        (scratch / "Sources/MSSOProtocol/WireNames.swift").read_text()
    assert '#define MSSO_METHOD_RENAME "rename"' in (scratch / "clients/c/msso_protocol.h").read_text()
    assert '\t// Renames a group.\n\tmethodRename = "rename"\n' in (scratch / "clients/go/names.go").read_text()

    names["maxFrame"]["value"] = 131072
    (scratch / DEFINITION).write_text(json.dumps(names, indent=2))
    assert stale(generate(scratch, "--check")) == {
        "Sources/MSSOProtocol/WireNames.swift", "clients/c/msso_protocol.h", "clients/python/src/msso/_wire.py",
        "clients/go/names.go"}
    assert generate(scratch).returncode == 0
    assert "public static let maximumPayload = 131072" in (scratch / "Sources/MSSOProtocol/WireNames.swift").read_text()
    assert "#define MSSO_MAX_FRAME 131072" in (scratch / "clients/c/msso_protocol.h").read_text()
    assert "\nMAX_FRAME = 131072\n" in (scratch / "clients/python/src/msso/_wire.py").read_text()
    assert "\tmaxFrame = 131072\n" in (scratch / "clients/go/names.go").read_text()


@pytest.mark.parametrize("path, old, new", [
    ("clients/go/names.go", '"Locked":             8,', '"Locked":             9,'),
    ("clients/c/msso_protocol.h", 'X(EXPIRED, "Expired", 1)', 'X(EXPIRED, "Expired", 2)'),
    ("clients/python/src/msso/errors.py", 'name, exit_status = "Busy", 3', 'name, exit_status = "Busy", 4'),
    ("clients/python/src/msso/_wire.py", '"corrupt"]', '"corrupt", "paused"]'),
    ("Sources/MSSOClient/ExitStatus.swift", "case config = 78", "case config = 79"),
    ("Sources/MSSOClient/SSOClient.swift", 'case expiring = "Expiring"\n', ""),
    ("Sources/MSSOProtocol/WireNames.swift", '"BrowserPrompt"', '"BrowserLogin"'),
    ("docs/PROTOCOL.md", "| `UnknownMethod` | no such method | 64 |", "| `UnknownMethod` | no such method | 65 |"),
    # The version, the frame cap and the method names.
    ("Sources/MSSOProtocol/WireNames.swift", "public let protocolVersion = 1", "public let protocolVersion = 2"),
    ("Sources/MSSOProtocol/WireNames.swift", "maximumPayload = 65536", "maximumPayload = 64 * 1024"),
    ("Sources/MSSOProtocol/WireNames.swift", 'extension Methods.Ping { public static let name = "ping" }\n', ""),
    ("clients/c/msso_protocol.h", "#define MSSO_MAX_FRAME 65536", "#define MSSO_MAX_FRAME 65535"),
    ("clients/c/msso_protocol.h", '#define MSSO_METHOD_SIGN "sign"', '#define MSSO_METHOD_SIGN "Sign"'),
    ("clients/python/src/msso/_wire.py", "PROTOCOL_VERSION = 1", "PROTOCOL_VERSION = 2"),
    ("clients/python/src/msso/_wire.py", "MAX_FRAME = 65536", "MAX_FRAME = 1 << 16"),
    ("clients/go/names.go", "\tProtocolVersion = 1", "\tProtocolVersion = 2"),
    ("clients/go/names.go", '\tmethodUnlock = "unlock"', '\tmethodUnlock = "lock"'),
])
def test_a_copy_edited_by_hand_fails_the_check(scratch, path, old, new):
    edit(scratch, path, old, new)
    assert stale(generate(scratch, "--check")) == {path}
    assert generate(scratch).returncode == 0      # regenerating puts the definition's back
    assert new not in (scratch / path).read_text() or new == ""
    assert generate(scratch, "--check").returncode == 0


def test_what_is_written_by_hand_around_a_region_is_the_files_own(scratch):
    edit(scratch, "clients/c/msso_protocol.h", '#define MSSO_SOCKET_NAME "msso/broker.sock"',
         '#define MSSO_SOCKET_NAME "msso/broker.sock" /* ! */')
    edit(scratch, "docs/PROTOCOL.md", "## Errors\n", "## Errors\n\nA sentence of ours.\n")
    assert generate(scratch, "--check").returncode == 0


@pytest.mark.parametrize("change, message", [
    (lambda n: n["errors"][0].update(exit="nowhere"), "exit 'nowhere' is not an exit status"),
    (lambda n: n["errors"].append(dict(n["errors"][0])), "name 'NotLoggedIn' twice"),
    (lambda n: n.update(errors=[e for e in n["errors"] if e["name"] != "Internal"]), "no Internal error"),
    (lambda n: n["exitStatuses"][1].update(status=0), "each status a different number"),
    (lambda n: n["methods"].append(dict(n["methods"][0])), "name 'hello' twice"),
    (lambda n: n["methods"][0].update(name="hello2"), "methods: hello2's name 'hello2'"),
    (lambda n: n["maxFrame"].update(value=0), "maxFrame: a value from 1"),
    (lambda n: n.pop("protocolVersion"), "protocolVersion: a value from 1"),
])
def test_a_broken_definition_is_refused(scratch, change, message):
    names = json.loads((scratch / DEFINITION).read_text())
    change(names)
    (scratch / DEFINITION).write_text(json.dumps(names))
    before = {path: (scratch / path).read_text() for path in COPIES}
    for args in [("--check",), ()]:
        done = generate(scratch, *args)
        assert done.returncode == 2 and message in done.stderr, done.stderr
    assert {path: (scratch / path).read_text() for path in COPIES} == before   # nothing written


def test_a_region_whose_markers_are_gone_is_an_error(scratch):
    edit(scratch, "clients/python/src/msso/_wire.py", "# END GENERATED prompts\n", "")
    done = generate(scratch, "--check")
    assert done.returncode == 2 and "no region 'prompts'" in done.stderr
