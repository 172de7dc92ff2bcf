"""Bad input over a raw socket: what the sender sees, and that everybody else is still served.

docs/PROTOCOL.md, Framing and Handshake: an over-long length prefix gets one error (serial 0,
BadRequest) and the connection is closed; a bad payload gets an error (serial 0, or the call's serial
when it could be read) and the connection stays open; the first call must be `hello`, sent once; a
client that sends no `hello` in time gets an error with serial 0 and is disconnected.
"""
import json
import os
import random
import resource
import socket
import sys
import subprocess
import struct
import threading
import time

import pytest

from harness import GROUP, SECRETS, Broker, Desktop, RawClient, frame

URL = "https://api.example.com/items"


@pytest.fixture(scope="module")
def shared_broker(idp):
    """One daemon takes all of this module's abuse (each test checks it still serves everybody)."""
    desktop = Desktop()
    daemon = Broker(desktop, idp)
    try:
        assert daemon.login().returncode == 0
        yield daemon
    finally:
        daemon.stop()
        desktop.cleanup()


@pytest.fixture
def logged_in(shared_broker):
    """The shared broker, alive, with alice logged in so `sign` shows that sessions keep working."""
    assert shared_broker.process.poll() is None, "mssod died"
    return shared_broker


def assert_served(broker):
    """A fresh connection is answered at once: ping, status, and sign for the logged-in session."""
    started = time.monotonic()
    other = RawClient(broker.socket, timeout=3)
    try:
        assert other.call("ping", {"data": "other"}) == {"type": "reply", "serial": 2, "result": {"data": "other"}}
        status = other.call("status", {})
        assert status["type"] == "reply" and status["result"]["groups"][0]["group"] == GROUP
        signed = other.call("sign", {"method": "GET", "url": URL})
        assert signed["type"] == "reply", signed
        ((name, value),) = signed["result"]["headers"]
        assert name == "Authorization" and value.startswith("Bearer ")
        SECRETS.add(value.split(" ", 1)[1])
    finally:
        other.close()
    assert time.monotonic() - started < 2, "another client waited"


def assert_usable(client):
    """The connection still works: a valid call right after is answered."""
    client.serial += 1
    serial = client.serial
    client.send({"type": "call", "serial": serial, "method": "ping", "args": {"data": "still here"}})
    assert client.receive() == {"type": "reply", "serial": serial, "result": {"data": "still here"}}


def assert_closed(client, within=2.0):
    started = time.monotonic()
    client.sock.settimeout(within)
    try:
        assert client.receive() is None, "expected the daemon to close the connection"
    except ConnectionResetError:
        pass
    assert time.monotonic() - started < within


def assert_nothing_arrives(client, wait=0.3):
    client.sock.settimeout(wait)
    with pytest.raises(socket.timeout):
        client.receive()
    client.sock.settimeout(5)


def peak_memory_kb(broker):
    for line in open(f"/proc/{broker.process.pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def error_of(message):
    assert message is not None, "the daemon closed the connection instead of answering"
    assert message["type"] == "error", message
    assert message["message"], "errors carry a sentence"
    return message["serial"], message["error"]


# -- the length prefix ---------------------------------------------------------------------------

@pytest.mark.parametrize("length", [0xFFFFFFFF, 0x80000000, 65537])
@pytest.mark.parametrize("then", ["nothing", "bytes"])
def test_a_length_over_the_cap_gets_one_error_and_the_connection_is_closed(logged_in, length, then):
    before = peak_memory_kb(logged_in)
    client = RawClient(logged_in.socket)
    started = time.monotonic()
    # The daemon must decide from the prefix alone: it never gets (or waits for) the payload.
    client.send_raw(struct.pack(">I", length) + (b"x" * 1000 if then == "bytes" else b""))
    assert error_of(client.receive()) == (0, "BadRequest")
    assert_closed(client)
    assert time.monotonic() - started < 1.5, "the daemon waited for a payload it should have refused"
    assert peak_memory_kb(logged_in) - before < 16 * 1024, "the daemon allocated for the announced length"
    assert_served(logged_in)


def test_a_frame_of_exactly_the_cap_is_read(logged_in):
    client = RawClient(logged_in.socket)
    # 65536 bytes that are not JSON: read whole (no close), answered as a bad payload.
    client.send_raw(frame(b"x" * 65536))
    assert error_of(client.receive()) == (0, "BadRequest")
    assert_usable(client)
    # And a valid call of exactly 65536 bytes is answered.
    call = {"type": "call", "serial": 100, "method": "ping", "args": {"data": ""}}
    call["args"]["data"] = "y" * (65536 - len(json.dumps(call)))
    payload = json.dumps(call).encode()
    assert len(payload) == 65536
    client.send_raw(frame(payload))
    assert client.receive() == {"type": "reply", "serial": 100, "result": {"data": call["args"]["data"]}}
    assert_served(logged_in)


# -- truncated frames ----------------------------------------------------------------------------

def test_a_truncated_frame_then_the_client_closes(logged_in):
    for cut in (b"\x00\x00", frame(b'{"type": "call", "serial": 2, "method": "ping", "args": {}}')[:20]):
        client = RawClient(logged_in.socket)
        client.send_raw(cut)
        client.close()
        assert_served(logged_in)
    assert logged_in.process.poll() is None


def test_a_truncated_frame_on_an_open_connection_holds_up_nobody(logged_in):
    payload = json.dumps({"type": "call", "serial": 9, "method": "ping", "args": {"data": "late"}}).encode()
    whole = frame(payload)
    half_header = RawClient(logged_in.socket)
    half_header.send_raw(whole[:2])
    half_payload = RawClient(logged_in.socket)
    half_payload.send_raw(whole[:20])

    assert_served(logged_in)
    assert_nothing_arrives(half_payload)
    assert_served(logged_in)

    # The daemon was just waiting for the rest: completing the frames gets them answered.
    half_header.send_raw(whole[2:])
    half_payload.send_raw(whole[20:])
    for client in (half_header, half_payload):
        assert client.receive() == {"type": "reply", "serial": 9, "result": {"data": "late"}}
        assert_usable(client)


def test_frames_split_byte_by_byte_and_frames_sharing_one_write(logged_in):
    client = RawClient(logged_in.socket)
    calls = [frame(json.dumps({"type": "call", "serial": n, "method": "ping", "args": {"data": str(n)}}).encode())
             for n in (20, 21, 22)]
    for byte in calls[0]:
        client.send_raw(bytes([byte]))
    assert client.receive()["serial"] == 20
    client.send_raw(calls[1] + calls[2])
    assert sorted(client.receive()["serial"] for _ in range(2)) == [21, 22]


# -- bad payloads --------------------------------------------------------------------------------

NOT_A_MESSAGE = {
    # payload: the serial of the answer (0 when none could be read)
    "random bytes": (random.Random(7).randbytes(512), 0),
    "empty": (b"", 0),
    "invalid UTF-8": (b"\xff\xfe\xfd\x80", 0),
    "invalid UTF-8 in a string": (b'{"type": "call", "serial": 3, "method": "ping", "args": {"data": "\xc3\x28"}}', 3),
    "a lone surrogate escape": (b'{"type": "call", "serial": 4, "method": "ping", "args": {"data": "\\ud800"}}', 4),
    "a JSON array": (b'[{"type": "call", "serial": 5, "method": "ping", "args": {"data": ""}}]', 0),
    "a JSON string": (b'"hello"', 0),
    "a JSON number": (b"42", 0),
    "null": (b"null", 0),
    "two objects": (b'{"type": "call"} {"type": "call"}', 0),
    "truncated JSON": (b'{"type": "call", "serial": 6, "method": "pi', 0),
    "no type": (b'{"serial": 7, "method": "ping", "args": {"data": ""}}', 7),
    "type is a number": (b'{"type": 1, "serial": 8, "method": "ping", "args": {"data": ""}}', 8),
    "a reply, from a client": (b'{"type": "reply", "serial": 9, "result": {}}', 9),
    "a signal, from a client": (b'{"type": "signal", "signal": "LoggedIn", "group": "x"}', 0),
    "serial is a string": (b'{"type": "call", "serial": "10", "method": "ping", "args": {"data": ""}}', 0),
    "serial is fractional": (b'{"type": "call", "serial": 1.5, "method": "ping", "args": {"data": ""}}', 0),
    "serial is negative": (b'{"type": "call", "serial": -1, "method": "ping", "args": {"data": ""}}', 0),
    "serial is 2^32": (b'{"type": "call", "serial": 4294967296, "method": "ping", "args": {"data": ""}}', 0),
    "serial is 0": (b'{"type": "call", "serial": 0, "method": "ping", "args": {"data": ""}}', 0),
    "no serial": (b'{"type": "call", "method": "ping", "args": {"data": ""}}', 0),
    "method is a number": (b'{"type": "call", "serial": 11, "method": 5, "args": {}}', 11),
    "no method": (b'{"type": "call", "serial": 12, "args": {}}', 12),
    "args is an array": (b'{"type": "call", "serial": 13, "method": "ping", "args": []}', 13),
    "args is null": (b'{"type": "call", "serial": 14, "method": "ping", "args": null}', 14),
    "an argument of the wrong type": (b'{"type": "call", "serial": 15, "method": "ping", "args": {"data": 5}}', 15),
    "sign headers not pairs": (b'{"type": "call", "serial": 16, "method": "sign", "args": '
                               b'{"method": "GET", "url": "https://a.example/", "headers": [["a"]]}}', 16),
    "logout all is a string": (b'{"type": "call", "serial": 17, "method": "logout", "args": {"all": "yes"}}', 17),
    # Nesting as deep as the cap allows (a recursive parser would overflow its stack). Unknown keys
    # are ignored, so a reply is fine too; None: "a reply, or BadRequest with serial 0 or 18".
    "deeply nested arrays": (b'{"type": "call", "serial": 18, "method": "ping", "args": {"data": "", "x": '
                             + b"[" * 32000 + b"]" * 32000 + b"}}", None),
    "deeply nested objects": (b'{"type": "call", "serial": 18, "method": "ping", "args": {"data": "", "x": '
                              + b'{"a":' * 10000 + b"1" + b"}" * 10000 + b"}}", None),
    "only brackets": (b"[" * 65536, 0),
}


@pytest.mark.parametrize("case", NOT_A_MESSAGE, ids=list(NOT_A_MESSAGE))
def test_a_bad_payload_is_answered_and_the_connection_stays_usable(logged_in, case):
    payload, serial = NOT_A_MESSAGE[case]
    client = RawClient(logged_in.socket)
    client.send_raw(frame(payload))
    answer = client.receive()
    if serial is None:
        assert answer is not None and answer["serial"] in (0, 18), answer
        assert answer["type"] == "reply" or answer["error"] == "BadRequest", answer
    else:
        assert error_of(answer) == (serial, "BadRequest"), answer
    assert_usable(client)
    assert_served(logged_in)


@pytest.mark.parametrize("method, args, field", [
    ("ping", None, "args"),
    ("ping", {}, "data"),
    ("sign", {}, "method"),
    ("sign", {"method": "GET"}, "url"),
    ("sign", {"url": URL}, "method"),
    ("login", {"flow": "password", "password": "x"}, "username"),
    ("login", {"flow": "password", "username": "alice"}, "password"),
    ("login", {"username": "alice", "password": "x"}, "flow"),
    ("login", {"flow": "magic"}, "flow"),
    ("subscribe", {"groups": "com.example.suite"}, "groups"),
])
def test_missing_or_invalid_arguments_are_a_bad_request_naming_the_field(logged_in, method, args, field):
    client = RawClient(logged_in.socket)
    call = {"type": "call", "serial": 40, "method": method}
    if args is not None:
        call["args"] = args
    client.send(call)
    answer = client.receive()
    assert error_of(answer) == (40, "BadRequest"), answer
    assert field in answer["message"], answer["message"]
    assert_usable(client)
    assert logged_in.status_json()["state"] == "valid", "a bad login call changed the session"


def test_an_unknown_method_is_unknown_method_with_the_serial(logged_in):
    client = RawClient(logged_in.socket)
    for serial, method in ((77, "frobnicate"), (78, ""), (79, "Sign"), (80, "hello " * 100)):
        client.send({"type": "call", "serial": serial, "method": method, "args": {}})
        assert error_of(client.receive()) == (serial, "UnknownMethod")
    assert_usable(client)
    assert_served(logged_in)


def test_pipelined_good_and_bad_calls_each_get_their_answer(logged_in):
    client = RawClient(logged_in.socket)
    def call(serial, method, args):
        return frame(json.dumps({"type": "call", "serial": serial, "method": method, "args": args}).encode())

    client.send_raw(call(50, "ping", {"data": "a"}) + frame(b"not json") + call(51, "nope", {})
                    + call(52, "sign", {"method": "GET", "url": URL}) + call(53, "sign", {}))
    answers = {}
    for _ in range(5):
        message = client.receive()
        answers[message["serial"]] = message
    assert answers[50]["result"] == {"data": "a"}
    assert error_of(answers[0]) == (0, "BadRequest")
    assert error_of(answers[51]) == (51, "UnknownMethod")
    ((name, value),) = answers[52]["result"]["headers"]
    SECRETS.add(value.split(" ", 1)[1])
    assert error_of(answers[53]) == (53, "BadRequest")


# -- the handshake -------------------------------------------------------------------------------

def test_no_call_works_before_hello(logged_in):
    client = RawClient(logged_in.socket, hello=False)
    for method, args in (("ping", {"data": "x"}), ("status", {}), ("sign", {"method": "GET", "url": URL}),
                         ("logout", {"all": True}), ("subscribe", {})):
        answer = client.call(method, args)
        assert error_of(answer) == (client.serial, "BadRequest"), (method, answer)
    assert logged_in.status_json()["state"] == "valid"
    assert_served(logged_in)


def test_hello_twice_is_a_bad_request(logged_in):
    client = RawClient(logged_in.socket)
    assert error_of(client.call("hello", {"version": 1})) == (client.serial, "BadRequest")
    assert_usable(client)


HELLO = {"type": "call", "serial": 1, "method": "hello", "args": {"version": 1}}
PING = frame(json.dumps({"type": "call", "serial": 2, "method": "ping", "args": {"data": "x"}}).encode())
# A hello frame of exactly 512 bytes, what mssod reads first from a new connection: the ping sent
# behind it is still in the kernel's buffer when hello is answered.
PADDED = dict(HELLO, args={"version": 1, "padding": ""})  # (unknown keys are ignored)
PADDED["args"]["padding"] = "p" * (512 - 4 - len(json.dumps(PADDED)))
BEHIND_HELLO = {
    "a whole call": frame(json.dumps(HELLO).encode()) + PING,
    "part of a call": frame(json.dumps(HELLO).encode()) + PING[:9],
    "a call still unread": frame(json.dumps(PADDED).encode()) + PING,
}


@pytest.mark.parametrize("behind", BEHIND_HELLO, ids=list(BEHIND_HELLO))
def test_hello_comes_alone(logged_in, behind):
    """Something written with hello (before its answer came) could have been written by a program
    the process ran before an exec that came before the daemon accepted the connection. Expected:
    hello is answered BadRequest, saying to wait for its answer, nothing behind it is answered, the
    connection is closed; a client that waits for the answer is served."""
    assert len(frame(json.dumps(PADDED).encode())) == 512
    client = RawClient(logged_in.socket, hello=False)
    client.send_raw(BEHIND_HELLO[behind])
    answer = client.receive()
    assert error_of(answer) == (1, "BadRequest")
    assert "before its answer came" in answer["message"] and "wait for the answer" in answer["message"]
    assert_closed(client)
    waits = RawClient(logged_in.socket, hello=False)
    assert waits.call("hello", {"version": 1})["type"] == "reply"
    assert_usable(waits)
    assert_served(logged_in)


@pytest.mark.parametrize("args, error", [
    ({"version": 2}, "UnsupportedVersion"),
    ({"version": 0}, "UnsupportedVersion"),
    ({}, "BadRequest"),
    ({"version": "1"}, "BadRequest"),
    ({"version": 1, "client": 5}, "BadRequest"),
])
def test_a_bad_hello(logged_in, args, error):
    client = RawClient(logged_in.socket, hello=False)
    assert error_of(client.call("hello", args)) == (1, error)
    # No hello succeeded: the connection still may not do anything else.
    assert error_of(client.call("status", {})) == (2, "BadRequest")
    assert_served(logged_in)


@pytest.fixture
def quick_hello(desktop, idp):
    daemon = Broker(desktop, idp, args=["--hello-timeout", "1"])
    assert daemon.login().returncode == 0
    yield daemon
    daemon.stop()


def test_a_client_that_never_says_hello_is_disconnected_while_others_are_served(quick_hello):
    silent = RawClient(quick_hello.socket, hello=False)
    half = RawClient(quick_hello.socket, hello=False)
    half.send_raw(b"\x00\x00")                  # half a length prefix: still no hello
    refused = RawClient(quick_hello.socket, hello=False)
    assert error_of(refused.call("ping", {"data": ""})) == (1, "BadRequest")  # a non-hello call does not count
    greeted = RawClient(quick_hello.socket)
    connected = time.monotonic()

    results = {}

    def wait_for_the_end(name, client):
        client.sock.settimeout(3)
        message = client.receive()
        results[name] = (time.monotonic() - connected, message, client.receive() if message else None)

    waiters = [threading.Thread(target=wait_for_the_end, args=item)
               for item in (("silent", silent), ("half", half), ("refused", refused))]
    for waiter in waiters:
        waiter.start()
    # Meanwhile others are served, again and again.
    while time.monotonic() - connected < 0.8:
        assert_served(quick_hello)
        time.sleep(0.1)
    for waiter in waiters:
        waiter.join(timeout=5)

    for name, (elapsed, message, after) in results.items():
        assert 0.8 <= elapsed <= 2.0, (name, elapsed)
        assert error_of(message) == (0, "BadRequest"), (name, message)
        assert after is None, (name, "not disconnected")
    assert set(results) == {"silent", "half", "refused"}

    # A client that did say hello is not subject to the timeout.
    time.sleep(max(0.0, connected + 1.3 - time.monotonic()))
    assert_usable(greeted)


# -- many connections ----------------------------------------------------------------------------

def open_idle(broker, count, hello):
    clients = []
    for _ in range(count):
        if hello:
            clients.append(RawClient(broker.socket))
        else:
            raw = socket.socket(socket.AF_UNIX)
            raw.connect(str(broker.socket))
            clients.append(raw)
    return clients


def test_many_idle_connections_do_not_stop_a_new_client(logged_in):
    idle = open_idle(logged_in, 100, hello=False) + open_idle(logged_in, 100, hello=True)
    try:
        for _ in range(3):
            assert_served(logged_in)
        # The idle ones are fine too.
        assert_usable(idle[-1])
    finally:
        for client in idle:
            client.close()
    assert_served(logged_in)


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


# Run by the test's Python as a leaky app of its own: open N connections, say how many the daemon
# kept, hold them until stdin closes.
LEAKY_APP = r"""
import select, socket, sys
kept = []
for _ in range(int(sys.argv[2])):
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])
    kept.append(s)
# The daemon takes connections in the order they came and refuses those past the share: once the
# last one is refused (readable: an error frame, then the end), every one before it was decided.
# A daemon that kept it (no share) makes this wait its 5 s, then the count says so.
select.select([kept[-1]], [], [], 5)
alive = 0
for s in kept:
    s.setblocking(False)
    try:
        s.recv(1)  # a refusal (an error frame, then the end of the stream), or an error
    except BlockingIOError:
        alive += 1  # nothing to read and not closed: the daemon kept it
    except OSError:
        pass
print(alive, flush=True)
sys.stdin.read()
"""


def test_idle_connections_under_a_systemd_like_descriptor_limit(desktop, idp):
    """mssod as a systemd user service gets LimitNOFILE=1024 (soft) by default. A few hundred
    connections of one leaky app must not lock everybody else out, nor make the daemon spin: the
    app is held to its own share (256 connections), everybody else is served."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))
    try:
        daemon = Broker(desktop, idp)  # inherits the limit
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    leaky = None
    try:
        assert daemon.login().returncode == 0
        leaky = subprocess.Popen([sys.executable, "-c", LEAKY_APP, str(daemon.socket), "600"], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
        kept = int(leaky.stdout.readline())  # well within the 10 s hello timeout
        assert kept == 256, f"the leaky app kept {kept} connections; its share is 256"
        cpu_before, wall_before = cpu_seconds(daemon.process.pid), time.monotonic()
        time.sleep(1)  # the interval the daemon's CPU time is measured over
        busy = (cpu_seconds(daemon.process.pid) - cpu_before) / (time.monotonic() - wall_before)
        served = None
        try:
            assert_served(daemon)
        except (OSError, AssertionError) as error:
            served = error
        assert served is None and busy < 0.2, (
            f"with 600 idle connections a new client got {served!r}; the idle daemon used {busy:.0%} of a CPU")
    finally:
        if leaky:
            leaky.kill()
            leaky.wait()
        daemon.stop()


def test_connections_closed_abruptly_mid_call_leave_the_daemon_fine(logged_in):
    for _ in range(50):
        client = RawClient(logged_in.socket)
        client.send({"type": "call", "serial": 2, "method": "sign", "args": {"method": "GET", "url": URL}})
        client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()
    assert_served(logged_in)
    assert logged_in.process.poll() is None
