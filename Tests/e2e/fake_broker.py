"""A stand-in for mssod on a Unix socket, for tests of what pam_msso does with what it hears.

    python3 fake_broker.py SOCKET RECORD SCENARIO [--then-exec MSSOD]

Binds SOCKET, answers `hello` as mssod does, then answers every other call as SCENARIO says, and
appends every byte it receives to RECORD. Serves until killed. Run as whichever uid the test
needs (the module talks only to a socket and a process of the user logging in).

With --then-exec, malware's trick against a module that judges the listening process: a child
keeps the listener and serves, while the process that made it execs the real mssod, handing it
the listener as systemd would (LISTEN_PID, LISTEN_FDS). Both then accept connections."""
import json
import os
import select
import socket
import struct
import sys
import threading
import time

GROUP = "com.example.hostile"
LATER = time.time() + 3600


def frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def message(value) -> bytes:
    return frame(json.dumps(value).encode())


def reply(serial, result) -> bytes:
    return message({"type": "reply", "serial": serial, "result": result})


def error(serial, text, name="NotLoggedIn") -> bytes:
    return message({"type": "error", "serial": serial, "error": name, "message": text})


def session(**fields):
    return dict({"group": GROUP, "state": "valid", "sessionExpiresAt": LATER, "admin": True}, **fields)


def status(*sessions):
    """A responder answering `status` with these sessions, and anything else (login) with a valid one."""
    return lambda method, serial: reply(serial, {"groups": list(sessions)} if method == "status" else session())


def raw_status(text: str):
    """A responder answering `status` with a reply whose result is this raw JSON text."""
    return lambda method, serial: frame(b'{"type": "reply", "serial": %d, "result": %s}' % (serial, text.encode()))


def envelope(**fields):
    """A responder whose every answer is this message, with the call's serial unless `fields` set one."""
    return lambda method, serial: message(dict({"serial": serial}, **fields))


ESCAPES = "\x1b]0;owned\x07\x1b[2J\u009b31mg\x7f\r"  # title, clear screen, C1 CSI, DEL, CR
NEVER = object()  # answer nothing, keep the connection open


class Last(bytes):
    """Bytes to send, after which the fake closes the connection."""

# name: (responder(method, serial) -> bytes | NEVER, what the module must show)
UNREACHABLE = "SSO: the credential broker is not reachable"
NO_ANSWER = "SSO: the credential broker did not answer in time."
SCENARIOS = {
    "groups-5": (raw_status('{"groups": 5}'), UNREACHABLE),
    "groups-null": (raw_status('{"groups": null}'), UNREACHABLE),
    "groups-object": (raw_status('{"groups": {"group": "x"}}'), UNREACHABLE),
    "result-array": (raw_status("[1, 2]"), UNREACHABLE),
    "result-null": (raw_status("null"), UNREACHABLE),
    "type-null": (envelope(type=None, result={"groups": []}), UNREACHABLE),
    "type-number": (envelope(type=5, result={"groups": []}), UNREACHABLE),
    "serial-string": (lambda method, serial: message({"type": "reply", "serial": str(serial), "result": {}}), UNREACHABLE),
    "serial-huge": (envelope(type="reply", serial=2 ** 70, result={}), UNREACHABLE),
    "error-without-message": (envelope(type="error", error="Internal"), UNREACHABLE),
    "error-message-null": (envelope(type="error", error="Internal", message=None), UNREACHABLE),
    "error-message-too-long": (lambda method, serial: error(serial, "x" * 1025), UNREACHABLE),
    "group-null": (status(session(group=None)), UNREACHABLE),
    "group-number": (status(session(group=7)), UNREACHABLE),
    "group-empty": (status(session(group="")), UNREACHABLE),
    "group-too-long": (status(session(group="g" * 256)), UNREACHABLE),
    "group-with-nul": (status(session(group="a\u0000b")), UNREACHABLE),
    "too-many-groups": (status(*[session(group=f"g{i}") for i in range(65)]), UNREACHABLE),
    "session-not-an-object": (status("valid"), UNREACHABLE),
    "state-null": (status(session(state=None)), UNREACHABLE),
    "state-unknown": (status(session(state="compromised")), UNREACHABLE),
    "admin-string": (status(session(admin="yes")), UNREACHABLE),
    "username-number": (status(session(username=5)), UNREACHABLE),
    "time-1e17": (status(session(sessionExpiresAt=1e17)), UNREACHABLE),
    "time-negative": (status(session(sessionExpiresAt=-1)), UNREACHABLE),
    "time-string": (status(session(sessionExpiresAt="14:03")), UNREACHABLE),
    "time-nan": (raw_status('{"groups": [{"group": "g", "state": "valid", "sessionExpiresAt": NaN}]}'), UNREACHABLE),
    "time-infinity": (raw_status('{"groups": [{"group": "g", "state": "valid", "sessionExpiresAt": 1e400}]}'), UNREACHABLE),
    "other-time-infinity": (raw_status('{"groups": [{"group": "g", "state": "valid", "sessionMaxAt": -Infinity}]}'), UNREACHABLE),
    "not-json": (lambda method, serial: frame(b"\x1b[2J not json"), UNREACHABLE),
    "invalid-utf8": (lambda method, serial: frame(b'{"type": "reply", "serial": %d, "result": {"groups": [{"group": "\xff\x1b", "state": "valid"}]}}' % serial), UNREACHABLE),
    "deep-nesting": (raw_status("[" * 100000 + "]" * 100000), UNREACHABLE),
    "trailing-garbage": (lambda method, serial: frame(b'{"type": "reply", "serial": %d, "result": {"groups": []}} {}' % serial), UNREACHABLE),
    "oversized-frame": (lambda method, serial: struct.pack(">I", 0xFFFFFFFF) + b"{" * 1000, UNREACHABLE),
    "truncated-frame": (lambda method, serial: Last(struct.pack(">I", 100) + b'{"type": "re'), NO_ANSWER),
    "closes": (lambda method, serial: Last(), NO_ANSWER),
    "never-replies": (lambda method, serial: NEVER, NO_ANSWER),
    "signals-forever": (lambda method, serial: message({"type": "signal", "signal": "\x1b[2J"}) * 2000, NO_ANSWER),
    "escapes-in-group": (status(session(group=ESCAPES)), "info: SSO ?]0;owned??[2J?31mg??: valid until "),
    "escapes-in-message": (lambda method, serial: error(serial, "\x1b[31mred\x1b[0m\nfake: line\u009b"),
                           "SSO: ?[31mred?[0m?fake: line?"),
    "corrupt": (status(session(state="corrupt")),
                f"info: SSO {GROUP}: the stored SSO credential is damaged; run `msso logout --group {GROUP}`."),
    "escapes-in-login-error": (lambda method, serial: error(serial, "\x1b]0;owned\x07 refused", "InvalidCredentials")
                               if method == "login" else reply(serial, {"groups": [session(state="notLoggedIn")]}),
                               f"error: SSO {GROUP}: login failed: ?]0;owned? refused"),
    "honest": (status(session(state="notLoggedIn")), f"info: SSO {GROUP}: not logged in"),
}

# Several accounts per group, for pam_msso alone (hostile_replies.py holds the libraries to the list
# above): each account shown, the login password sent to the account named like the login user
# (the PAM driver's is alice) or to the default, and a name outside the broker's rule (1 to 64
# letters, digits, . _ - @ +, beginning with a letter or digit) refused as no broker.
ACCOUNTS = (session(account="default", state="notLoggedIn"), session(account="admin", isDefault=True),
            session(account="work", state="expired"))
ACCOUNT_SCENARIOS = {
    "account-escapes": (status(session(account=ESCAPES)), UNREACHABLE),
    "account-too-long": (status(session(account="a" * 65)), UNREACHABLE),
    "account-number": (status(session(account=7)), UNREACHABLE),
    "account-null": (status(session(account=None)), UNREACHABLE),
    "account-empty": (status(session(account="")), UNREACHABLE),
    "account-an-option": (status(session(account="-rf")), UNREACHABLE),
    "account-a-path": (status(session(account="../x")), UNREACHABLE),
    "is-default-string": (status(session(isDefault="yes")), UNREACHABLE),
    "accounts": (status(*ACCOUNTS), [
        f"info: SSO {GROUP}: not logged in; run `msso login --group {GROUP}`.",
        f"info: SSO {GROUP} (account admin, the default): valid until ",
        f"info: SSO {GROUP} (account work): expired at "]),
    "accounts-none-the-default": (status(session(account="admin"), session(account="work", state="notLoggedIn")),
                                  [f"info: SSO {GROUP} (account work): not logged in; run `msso login --group {GROUP} --account work`."]),
    "account-like-the-user": (status(session(account="default", isDefault=True), session(account="alice", state="notLoggedIn")),
                              [f"info: SSO {GROUP} (account alice): not logged in"]),
    "no-account-like-the-user": (status(session(account="default", isDefault=True, state="notLoggedIn"), session(account="alice2"),
                                        session(account="admin")), [f"info: SSO {GROUP}: not logged in"]),
}


def read_exactly(conn, n, record):
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
        with open(record, "ab") as out:
            out.write(chunk)
    return data


def serve(conn, record, responder):
    while True:
        header = read_exactly(conn, 4, record)
        body = header and read_exactly(conn, struct.unpack(">I", header)[0], record)
        if body is None:
            return
        call = json.loads(body)
        serial, method = call["serial"], call["method"]
        if method == "hello":
            answer = reply(serial, {"version": 1, "daemon": "mssod 0.1.0", "peer": {"uid": os.getuid(), "pid": 1}})
        else:
            answer = responder(method, serial)
        if answer is NEVER:
            continue
        conn.sendall(answer)
        if isinstance(answer, Last):
            return


def main():
    path, record, name, *then_exec = sys.argv[1:]
    responder = {**SCENARIOS, **ACCOUNT_SCENARIOS}[name][0]
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen()
    if then_exec and os.fork() != 0:
        os.dup2(os.dup(listener.fileno()), 3)  # the listener may be fd 3 already: dup2 would keep it close-on-exec
        os.set_inheritable(3, True)
        os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS="1")
        os.execv(then_exec[1], [then_exec[1]])
    while True:
        # With --then-exec mssod makes the listener (one open file for both) non-blocking.
        select.select([listener], [], [])
        try:
            conn, _ = listener.accept()
        except BlockingIOError:
            continue  # mssod took it
        conn.setblocking(True)
        threading.Thread(target=serve_quietly, args=(conn, record, responder), daemon=True).start()


def serve_quietly(conn, record, responder):
    try:
        serve(conn, record, responder)
    except OSError:
        pass
    finally:
        conn.close()


if __name__ == "__main__":
    main()
