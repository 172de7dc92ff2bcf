"""What a hostile or broken broker may send a client library, and what the library must make of it:
one list for the Python, Go and C libraries' tests (test_python_library.py, test_go_library.py,
test_c_library.py), so that the three behave alike.

Each case names the verb the library calls, the broker's answer to it (a responder, as in
fake_broker.py: every scenario of that file is a case here, answering `status`) and the outcome:
"ok", or the name of the library's own error (never another exception, a panic or a crash).
After each case the library must still serve a `ping` (on the same connection, or on a new one
when it closed its own), and what it held during the case must stay within MEMORY_BOUND: signals
nobody subscribed to are dropped, and a subscriber's queue holds at most MAX_EVENTS events and
MAX_EVENT_BYTES of their frames, past which the connection is closed (the subscriber then gets
what was queued, then BrokerUnreachable). `check` holds what a library made of a case to that.

    brokers = HostileBrokers(directory)     # every case on a socket of its own, served by threads
    brokers.path("not-json")
"""
import json
import os
import socket
import struct
import threading
from dataclasses import dataclass
from typing import Callable

import fake_broker
from fake_broker import GROUP, NEVER, Last, error, frame, message, reply, session

# libmsso's limits (clients/c), which the Python and Go libraries mirror.
MAX_FRAME = 65536
MAX_DEPTH = 32
MAX_EVENTS = 4096
MAX_EVENT_BYTES = 1 << 20

INTERNAL, UNREACHABLE, OK = "Internal", "BrokerUnreachable", "ok"


@dataclass(frozen=True)
class Case:
    respond: Callable            # (method, serial) -> bytes | Last | NEVER | a list of chunks to send
    outcome: str                 # "ok" or the error's name
    verb: str = "status"         # status, check, sign, token, logout, subscribe, hello, login-device
    timeout: float = 5.0         # the call's timeout, in seconds
    subscribed: bool = False     # subscribe (answered honestly) before the verb
    events: int | None = None    # the signals the subscriber then gets before BrokerUnreachable


def raw(serial_text: str, result: str) -> bytes:
    """A reply's frame whose serial and result are these raw JSON texts."""
    return frame(b'{"type": "reply", "serial": %s, "result": %s}' % (serial_text.encode(), result.encode()))


def answer(result):
    """A responder answering every call with this result."""
    return lambda method, serial: reply(serial, result)


def raw_answer(text: str):
    """A responder answering every call with a reply whose result is this raw JSON text."""
    return lambda method, serial: raw(str(serial), text)


def signal(name="LoggedIn", group=GROUP, **fields) -> bytes:
    return message({"type": "signal", "signal": name, "group": group, **fields})


def prompt(fields, then=NEVER):
    """A responder that sends a login's DevicePrompt with these fields, then `then`."""
    def respond(method, serial):
        sent = message({"type": "signal", "signal": "DevicePrompt", "group": GROUP, "serial": serial, "prompt": fields})
        return sent if then is NEVER else [sent, then(serial)]
    return respond


def before(chunks, result):
    """A responder that sends these chunks (signals) before its honest answer."""
    return lambda method, serial: [*chunks, reply(serial, result)]


def nested(levels: int) -> str:
    """A status result whose frame is nested `levels` deep in all (the message is the first level)."""
    arrays = levels - 2
    return '{"groups": [], "x": %s%s}' % ("[" * arrays, "]" * arrays)


def padded(size: int):
    """A responder answering with a valid status reply whose payload is `size` bytes."""
    def respond(serial):
        head = b'{"type": "reply", "serial": %d, "result": {"groups": [], "pad": "' % serial
        return frame(head + b"x" * (size - len(head) - 3) + b'"}}')
    return lambda method, serial: respond(serial)


# A signal of about 60 KiB (its username), in a frame well within the protocol's cap.
BIG = signal(status=session(username="u" * 60000))
SMALL = signal("Expiring")


def kept(frame_bytes: bytes) -> int:
    """How many of these signals a subscriber's queue holds before the connection is closed."""
    payload = len(frame_bytes) - 4
    return min(MAX_EVENTS, MAX_EVENT_BYTES // payload)


VALID = {"groups": [session()]}
PROMPT = {"verificationURI": "https://idp.example/device", "userCode": "ABCD-EFGH", "expiresAt": 2e9}

# What libmsso made of fake_broker.py's scenarios (written for the PAM module, whose limits are its
# own: a long group name or 65 groups are fine here), now every library's.
FROM_FAKE_BROKER = {
    "groups-5": INTERNAL, "groups-null": INTERNAL, "groups-object": INTERNAL, "result-array": INTERNAL,
    "result-null": INTERNAL, "type-null": INTERNAL, "type-number": INTERNAL, "serial-string": INTERNAL,
    "serial-huge": INTERNAL, "error-without-message": INTERNAL, "error-message-null": INTERNAL,
    "error-message-too-long": "NotLoggedIn", "group-null": INTERNAL, "group-number": INTERNAL, "group-empty": OK,
    "group-too-long": OK, "group-with-nul": INTERNAL, "too-many-groups": OK, "session-not-an-object": INTERNAL,
    "state-null": INTERNAL, "state-unknown": OK, "admin-string": INTERNAL, "username-number": INTERNAL,
    "time-1e17": OK, "time-negative": OK, "time-string": INTERNAL, "time-nan": INTERNAL, "time-infinity": INTERNAL,
    "other-time-infinity": INTERNAL, "not-json": INTERNAL, "invalid-utf8": INTERNAL, "deep-nesting": INTERNAL,
    "trailing-garbage": INTERNAL, "oversized-frame": INTERNAL, "truncated-frame": UNREACHABLE, "closes": UNREACHABLE,
    "never-replies": UNREACHABLE, "signals-forever": INTERNAL, "escapes-in-group": OK,
    "escapes-in-message": "NotLoggedIn", "corrupt": OK, "escapes-in-login-error": OK, "honest": OK,
}
assert set(FROM_FAKE_BROKER) == set(fake_broker.SCENARIOS), "a new scenario in fake_broker.py: say what the libraries make of it"
WAITS = {"never-replies"}   # answered by the call's timeout: kept short

CASES: dict[str, Case] = {
    name: Case(fake_broker.SCENARIOS[name][0], outcome, timeout=0.5 if name in WAITS else 5.0)
    for name, outcome in FROM_FAKE_BROKER.items()
}
CASES.update({
    # The envelope.
    "message-not-an-object": Case(lambda method, serial: frame(b"[1, 2]"), INTERNAL),
    "serial-negative": Case(lambda method, serial: raw("-1", '{"groups": []}'), INTERNAL),
    "serial-fraction": Case(lambda method, serial: raw(f"{serial}.0", '{"groups": []}'), INTERNAL),
    "serial-true": Case(lambda method, serial: raw("true", '{"groups": []}'), INTERNAL),
    "reply-without-result": Case(lambda method, serial: message({"type": "reply", "serial": serial}), INTERNAL),
    "error-name-number": Case(lambda method, serial: message({"type": "error", "serial": serial, "error": 5,
                                                              "message": "x"}), INTERNAL),
    "reply-to-another-serial": Case(lambda method, serial: reply(serial + 7, VALID), UNREACHABLE, timeout=0.5),
    "unknown-type-first": Case(lambda method, serial: [message({"type": "notice", "serial": serial, "text": "hi"}),
                                                       reply(serial, VALID)], OK),
    "stray-error-then-close": Case(lambda method, serial: Last(error(0, "too many connections", "Busy")), "Busy"),
    "lone-surrogate": Case(raw_answer('{"groups": [{"group": "a\\ud800b", "state": "valid"}]}'), INTERNAL),
    "nesting-at-the-limit": Case(raw_answer(nested(MAX_DEPTH)), OK),
    "nesting-past-the-limit": Case(raw_answer(nested(MAX_DEPTH + 1)), INTERNAL),
    "nesting-within-a-frame": Case(raw_answer(nested(30000)), INTERNAL),   # (fake_broker's is over 64 KiB)
    "frame-at-the-limit": Case(padded(MAX_FRAME), OK),
    "frame-past-the-limit": Case(lambda method, serial: Last(struct.pack(">I", MAX_FRAME + 1) + b"{" * (MAX_FRAME + 1)),
                                 INTERNAL),
    "half-frame-then-close": Case(lambda method, serial: Last(padded(1000)(method, serial)[:500]), UNREACHABLE),
    "signal-name-number": Case(lambda method, serial: [message({"type": "signal", "signal": 5, "group": GROUP}),
                                                       reply(serial, VALID)], INTERNAL),
    # Each verb's result.
    "check-result-string": Case(answer("valid"), INTERNAL, verb="check"),
    "check-group-missing": Case(answer({"state": "valid"}), INTERNAL, verb="check"),
    "sign-headers-missing": Case(answer({}), INTERNAL, verb="sign"),
    "sign-header-alone": Case(answer({"headers": [["Authorization"]]}), INTERNAL, verb="sign"),
    "sign-header-of-three": Case(answer({"headers": [["Authorization", "Bearer x", "y"]]}), INTERNAL, verb="sign"),
    "sign-header-value-number": Case(answer({"headers": [["Authorization", 5]]}), INTERNAL, verb="sign"),
    "sign-honest": Case(answer({"headers": [["Authorization", "Bearer x"]]}), OK, verb="sign"),
    "token-without-expiry": Case(answer({"accessToken": "x", "header": "Bearer"}), INTERNAL, verb="token"),
    "token-number": Case(answer({"accessToken": 5, "expiresAt": 2e9, "header": "Bearer"}), INTERNAL, verb="token"),
    "token-honest": Case(answer({"accessToken": "x", "expiresAt": 2e9, "header": "Bearer"}), OK, verb="token"),
    "logout-logged-out-string": Case(answer({"loggedOut": GROUP}), INTERNAL, verb="logout"),
    "logout-revoked-string": Case(answer({"loggedOut": [], "revoked": "yes"}), INTERNAL, verb="logout"),
    "logout-not-revoked-without-group": Case(answer({"loggedOut": [GROUP], "revoked": False, "notRevoked": [
        {"reason": "x", "refreshToken": True}]}), INTERNAL, verb="logout"),
    "logout-honest": Case(answer({"loggedOut": [GROUP], "revoked": False, "notRevoked": [
        {"group": GROUP, "reason": "x", "refreshToken": True, "accessTokenExpiresAt": 2e9}]}), OK, verb="logout"),
    "subscribe-group-number": Case(answer({"groups": [1]}), INTERNAL, verb="subscribe"),
    "hello-without-peer": Case(answer({"version": 1, "daemon": "mssod"}), INTERNAL, verb="hello"),
    "hello-version-string": Case(answer({"version": "1", "daemon": "mssod", "peer": {"uid": 1, "pid": 1}}), INTERNAL,
                                 verb="hello"),
    "hello-result-null": Case(answer(None), INTERNAL, verb="hello"),
    "hello-refused": Case(lambda method, serial: error(serial, "speak version 1", "UnsupportedVersion"),
                          "UnsupportedVersion", verb="hello"),
    "prompt-not-an-object": Case(prompt("open https://idp.example/device"), INTERNAL, verb="login-device"),
    "prompt-without-code": Case(prompt({"verificationURI": "https://idp.example/device", "expiresAt": 2e9}), INTERNAL,
                                verb="login-device"),
    "prompt-honest": Case(prompt(PROMPT, lambda serial: reply(serial, session())), OK, verb="login-device"),
    # Signals: dropped when nobody subscribed; a subscriber's queue is bounded.
    "signals-nobody-asked-for": Case(before([BIG] * 1000, VALID), OK),
    "signals-left-unread": Case(before([SMALL] * (MAX_EVENTS + 1000), VALID), UNREACHABLE, subscribed=True,
                                events=MAX_EVENTS),
    "big-signals-left-unread": Case(before([BIG] * 500, VALID), UNREACHABLE, subscribed=True, events=kept(BIG)),
})

# How much more memory a library may hold during a case than before it (before these bounds, a
# library that kept the signals nobody asked for held some 58 MiB here, the big ones left unread
# 30 MiB or more).
MEMORY_BOUND = 16 << 20
METHODS = {"login-device": "login"}


def honest(method, serial):
    """What the fake answers outside a case's verb: enough for the library to go on."""
    if method == "hello":
        return reply(serial, {"version": 1, "daemon": "mssod 0.1.0", "peer": {"uid": os.getuid(), "pid": 1}})
    if method == "ping":
        return reply(serial, {"data": "after"})
    if method == "subscribe":
        return reply(serial, {"groups": [GROUP]})
    return None


def serve(conn, case: Case):
    method_of_case = METHODS.get(case.verb, case.verb)
    while True:
        header = fake_broker.read_exactly(conn, 4, os.devnull)
        body = header and fake_broker.read_exactly(conn, struct.unpack(">I", header)[0], os.devnull)
        if body is None:
            return
        call = json.loads(body)
        method, serial = call["method"], call["serial"]
        sent = (honest(method, serial) if method != method_of_case else None) or case.respond(method, serial)
        if sent is NEVER:
            continue
        for chunk in [sent] if isinstance(sent, bytes) else sent:
            conn.sendall(chunk)
        if isinstance(sent, Last):
            return


class HostileBrokers:
    """Every case (or those named) on a socket of its own in `directory`, served from this process."""

    def __init__(self, directory, names=None):
        self.directory = str(directory)
        self.listeners = []
        for name in names or CASES:
            listener = socket.socket(socket.AF_UNIX)
            listener.bind(self.path(name))
            listener.listen()
            self.listeners.append(listener)
            threading.Thread(target=self._accept, args=(listener, CASES[name]), daemon=True).start()

    def path(self, name) -> str:
        return os.path.join(self.directory, name)

    def _accept(self, listener, case):
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn, case), daemon=True).start()

    @staticmethod
    def _serve(conn, case):
        try:
            serve(conn, case)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self):
        for listener in self.listeners:
            listener.close()


def rss(pid, key="VmRSS") -> int:
    """A process's resident memory (VmRSS), or its peak (VmHWM), in bytes."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise LookupError(f"no {key} in /proc/{pid}/status")


def peak_rss(pid) -> int:
    return rss(pid, "VmHWM")


def reset_peak_rss(pid):
    """Sets a process's VmHWM back to its present resident memory (Linux 4.0 and later)."""
    with open(f"/proc/{pid}/clear_refs", "w") as refs:
        refs.write("5")


def check(name, got):
    """Holds what a library made of a case (`got`: outcome, message, events, ended, endedMessage,
    after, memory) to what it must."""
    case = CASES[name]
    assert got["outcome"] == case.outcome, (name, got)
    if case.outcome != OK:
        assert got["message"], (name, "an error names its cause", got)
    if case.events is not None:
        assert (got["events"], got["ended"]) == (case.events, UNREACHABLE), (name, got)
        assert "unread" in got["endedMessage"], (name, got)
    # Still usable: the same connection, or a new one (a hello refused every time is refused again).
    assert got["after"] == ("after" if case.verb != "hello" else case.outcome), (name, got)
    assert got["memory"] < MEMORY_BOUND, (name, f"{got['memory'] / 2 ** 20:.1f} MiB held")
