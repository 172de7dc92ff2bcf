#!/usr/bin/env python3
"""A Python client for the msso broker (mssod), written from docs/PROTOCOL.md alone.

Standard library only. Import it:

    from msso_client import MSSOClient, MSSOError

    with MSSOClient() as msso:
        for name, value in msso.sign("GET", "https://api.example.com/items"):
            request.add_header(name, value)

or run it as a small command-line tool:

    python3 msso_client.py status
    python3 msso_client.py check
    python3 msso_client.py sign https://api.example.com/items
    python3 msso_client.py login alice          # password read from stdin or the terminal
    python3 msso_client.py watch                # print LoggedIn/LoggedOut/... as they happen

One MSSOClient is one connection. Several threads may share one (calls are matched to replies by
serial, so they can be in flight at the same time), and one connection per thread works too.
"""
from __future__ import annotations

import base64
import collections
import hashlib
import json
import os
import select
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

PROTOCOL_VERSION = 1
MAX_FRAME = 65536          # payload cap, both directions
MAX_SERIAL = 0xFFFFFFFF    # serials are 1 ... 2^32 - 1; 0 means "not an answer to a call"
DEFAULT_TIMEOUT = 60.0     # seconds a call may take; IdP and keyring calls are bounded by the daemon
_DEFAULT = object()


class MSSOError(Exception):
    """An error from the broker: `name` is the stable name from the protocol's error table.

    Branch on `name`, show `message` to the user. Names the daemon never sends:
    `BrokerUnreachable` (nothing answers on the socket, the connection was lost, or a call got no
    answer within the client's timeout) and `ProtocolError` (the daemon sent something this
    client cannot parse).
    """

    def __init__(self, name: str, message: str = ""):
        super().__init__(f"{name}: {message}" if message else name)
        self.name = name
        self.message = message


@dataclass
class Signal:
    """A signal from the broker, e.g. Signal(name="LoggedOut", group="com.example.suite", ...)."""
    name: str
    group: str | None
    status: dict | None
    raw: dict = field(repr=False)


def default_socket_path() -> str:
    """$MSSO_SOCKET, else $XDG_RUNTIME_DIR/msso/broker.sock (as in the protocol's Transport section)."""
    if os.environ.get("MSSO_SOCKET"):
        return os.environ["MSSO_SOCKET"]
    runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"
    return os.path.join(runtime, "msso", "broker.sock")


class MSSOClient:
    """One connection to mssod. `hello` is sent by the constructor; `peer` and `daemon` hold its answer."""

    def __init__(self, socket_path: str | os.PathLike | None = None, client: str = "msso_client.py",
                 timeout: float | None = DEFAULT_TIMEOUT):
        self.socket_path = str(socket_path or default_socket_path())
        self.timeout = timeout
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.connect(self.socket_path)
        except OSError as error:
            self._sock.close()
            raise MSSOError("BrokerUnreachable", f"cannot connect to {self.socket_path}: {error.strerror}") from None

        # The socket stays blocking (so sends never time out half-way); reads wait with select().
        self._send_lock = threading.Lock()
        self._cond = threading.Condition()
        self._buffer = b""
        self._serial = 0
        self._pending: set[int] = set()
        self._answers: dict[int, dict] = {}
        self._prompts: dict[int, collections.deque] = {}
        self._signals: collections.deque[Signal] = collections.deque()
        self._stray_errors: collections.deque[MSSOError] = collections.deque()
        self._reading = False           # one thread at a time reads the socket, for everybody
        self._closed: MSSOError | None = None

        try:
            hello = self.call("hello", {"version": PROTOCOL_VERSION, "client": client})
        except BaseException:
            self.close()
            raise
        self.version: int = hello.get("version", PROTOCOL_VERSION)
        self.daemon: str = hello.get("daemon", "")
        self.peer: dict = hello.get("peer", {})

    # -- the methods ---------------------------------------------------------------------------

    def ping(self, data: str = "") -> str:
        return self.call("ping", {"data": data})["data"]

    def status(self, group: str | None = None) -> list[dict]:
        """SessionStatus of the named group, or of every configured group: a list either way."""
        return self.call("status", _with_group({}, group))["groups"]

    def check(self, group: str | None = None) -> dict:
        """The group's SessionStatus. A missing or expired session is a `state`, not an error."""
        return self.call("check", _with_group({}, group))

    def sign(self, method: str, url: str, headers: Iterable[tuple[str, str]] | Mapping[str, str] | None = None,
             body: bytes | str | None = None, group: str | None = None) -> list[tuple[str, str]]:
        """The headers to add to the described request, as (name, value) pairs."""
        args: dict[str, Any] = {"method": method, "url": url}
        if headers:
            pairs = headers.items() if isinstance(headers, Mapping) else headers
            args["headers"] = [[name, value] for name, value in pairs]
        if body is not None:
            if isinstance(body, str):
                body = body.encode()
            args["bodySHA256"] = base64.b64encode(hashlib.sha256(body).digest()).decode("ascii")
        result = self.call("sign", _with_group(args, group))
        return [(name, value) for name, value in result["headers"]]

    def login_password(self, username: str, password: str, group: str | None = None) -> dict:
        """OAuth 2.0 password grant. Returns the new SessionStatus."""
        return self.call("login", _with_group({"flow": "password", "username": username, "password": password},
                                               group))

    def login_device(self, group: str | None = None, on_prompt: Callable[[dict], None] | None = None,
                     timeout: float | None = None) -> dict:
        """Device authorization grant: `on_prompt(prompt)` is called with {"verificationURI", "userCode",
        ...} to show the user; returns the SessionStatus once they approved. Waits without limit by
        default: the daemon answers `LoginDenied` when the code expires."""
        return self.call("login", _with_group({"flow": "device"}, group), timeout=timeout,
                          on_prompt=on_prompt or _print_prompt)

    def extend(self, group: str | None = None) -> dict:
        """Slides the session window. Returns the new SessionStatus."""
        return self.call("extend", _with_group({}, group))

    def logout(self, group: str | None = None, all: bool = False) -> list[str]:
        """Ends the session (of every group with all=True). Returns the groups that were logged in."""
        if all and group:
            raise ValueError("logout: give a group or all=True, not both")
        return self.call("logout", {"all": True} if all else _with_group({}, group))["loggedOut"]

    def subscribe(self, groups: Iterable[str] | None = None) -> list[str]:
        """Asks for the groups' signals (all groups when none are named); read them with next_event()."""
        return self.call("subscribe", {} if groups is None else {"groups": list(groups)})["groups"]

    def next_event(self, timeout: float | None = None) -> Signal | None:
        """The next signal, waiting at most `timeout` seconds (None: forever). None on timeout.

        Raises MSSOError for an error with serial 0 (e.g. the handshake timed out) or when the
        connection is gone."""
        def ready():
            if self._stray_errors:
                raise self._stray_errors.popleft()
            return self._signals.popleft() if self._signals else None
        return self._wait(ready, timeout)

    def close(self):
        with self._cond:
            if self._closed is None:
                self._closed = MSSOError("BrokerUnreachable", "the connection was closed by the client")
            self._cond.notify_all()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- calls and replies ----------------------------------------------------------------------

    def call(self, method: str, args: dict, timeout: float | None | object = _DEFAULT,
             on_prompt: Callable[[dict], None] | None = None) -> dict:
        """Any method by name: returns the reply's `result`, raises MSSOError for an error reply.

        The methods above are thin wrappers around this; it is public for methods this client does
        not know yet. `timeout` defaults to the client's (None: wait forever)."""
        if timeout is _DEFAULT:
            timeout = self.timeout
        with self._cond:
            if self._closed:
                raise self._closed
            serial = self._next_serial()
            self._pending.add(serial)
            self._prompts[serial] = collections.deque()
        payload = json.dumps({"type": "call", "serial": serial, "method": method, "args": args},
                             separators=(",", ":"), ensure_ascii=False).encode()
        try:
            if len(payload) > MAX_FRAME:
                raise MSSOError("BadRequest", f"the {method} call is {len(payload)} bytes; the limit is {MAX_FRAME}")
            try:
                with self._send_lock:
                    self._sock.sendall(struct.pack(">I", len(payload)) + payload)
            except OSError as error:
                self._fail(MSSOError("BrokerUnreachable", f"lost the connection to the broker: {error}"))
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                answer_or_prompt = self._wait(
                    lambda: self._answers.pop(serial, None) or
                    (self._prompts[serial].popleft() if self._prompts[serial] else None),
                    None if deadline is None else max(0.0, deadline - time.monotonic()))
                if answer_or_prompt is None:
                    raise MSSOError("BrokerUnreachable", f"no answer to {method} within {timeout} s")
                if answer_or_prompt.get("type") == "signal":   # a DevicePrompt for this call
                    if on_prompt:
                        on_prompt(answer_or_prompt.get("prompt", {}))
                    continue
                if answer_or_prompt.get("type") == "error":
                    raise MSSOError(answer_or_prompt.get("error", "Internal"), answer_or_prompt.get("message", ""))
                return answer_or_prompt.get("result", {})
        finally:
            with self._cond:
                # A reply that arrives after we gave up is dropped by _dispatch (serial no longer pending).
                self._pending.discard(serial)
                self._answers.pop(serial, None)
                self._prompts.pop(serial, None)

    def _next_serial(self) -> int:
        # Unique among *pending* calls is all the protocol asks; wrapping around after 2^32 - 1 is fine.
        for _ in range(MAX_SERIAL):
            self._serial = self._serial % MAX_SERIAL + 1
            if self._serial not in self._pending:
                return self._serial
        raise MSSOError("BadRequest", "too many calls in flight")

    def _wait(self, ready: Callable[[], Any], timeout: float | None):
        """Returns ready()'s first non-None value, reading the socket as needed; None after `timeout`.

        Leader/follower: whichever waiting thread finds nobody reading becomes the reader and
        files every message it gets (answers by serial, signals in a queue) for everybody; the
        others sleep on the condition until something arrives."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                value = ready()
                if value is not None:
                    return value
                if self._closed:
                    raise self._closed
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                if self._reading:
                    self._cond.wait(remaining)
                    continue
                self._reading = True
                self._cond.release()
                try:
                    messages, failure = self._read(remaining)
                finally:
                    self._cond.acquire()
                    self._reading = False
                for message in messages:
                    self._dispatch(message)
                if failure and not self._closed:
                    # If the daemon said why before closing (serial 0: Forbidden, handshake timeout,
                    # oversized frame), that is the better error to report.
                    self._closed = self._stray_errors[-1] if self._stray_errors else failure
                self._cond.notify_all()

    def _read(self, timeout: float | None) -> tuple[list[dict], MSSOError | None]:
        """Reads what is available (waiting up to `timeout`); returns the complete messages."""
        try:
            readable, _, _ = select.select([self._sock], [], [], timeout)
            if not readable:
                return [], None
            chunk = self._sock.recv(MAX_FRAME + 4)
        except (OSError, ValueError) as error:      # ValueError: the socket was closed under us
            return [], MSSOError("BrokerUnreachable", f"lost the connection to the broker: {error}")
        closed = MSSOError("BrokerUnreachable", "the broker closed the connection") if not chunk else None
        self._buffer += chunk
        try:
            return self._frames(), closed
        except MSSOError as error:
            return [], error

    def _frames(self) -> list[dict]:
        # A partial frame stays in the buffer until the rest arrives, so timeouts never desynchronize.
        messages = []
        while len(self._buffer) >= 4:
            (length,) = struct.unpack(">I", self._buffer[:4])
            if length > MAX_FRAME:
                raise MSSOError("ProtocolError", f"the broker sent a {length}-byte frame")
            if len(self._buffer) < 4 + length:
                break
            payload, self._buffer = self._buffer[4:4 + length], self._buffer[4 + length:]
            try:
                message = json.loads(payload.decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                raise MSSOError("ProtocolError", "the broker sent a frame that is not UTF-8 JSON") from None
            if isinstance(message, dict):
                messages.append(message)
        return messages

    def _dispatch(self, message: dict):
        kind = message.get("type")
        if kind in ("reply", "error"):
            serial = message.get("serial")
            if serial in self._pending:
                self._answers[serial] = message
            elif kind == "error" and serial == 0:
                self._stray_errors.append(MSSOError(message.get("error", "Internal"), message.get("message", "")))
            # Anything else answers a call nobody waits for any more: drop it.
        elif kind == "signal":
            if message.get("signal") == "DevicePrompt":
                queue = self._prompts.get(message.get("serial"))
                if queue is not None:
                    queue.append(message)
                return
            self._signals.append(Signal(message.get("signal", ""), message.get("group"), message.get("status"),
                                        message))
        # Unknown message types are ignored, like unknown keys.

    def _fail(self, error: MSSOError):
        with self._cond:
            if not self._closed:
                self._closed = error
            self._cond.notify_all()
        raise error


def _with_group(args: dict, group: str | None) -> dict:
    if group is not None:
        args["group"] = group
    return args


def _print_prompt(prompt: dict):
    uri = prompt.get("verificationURIComplete") or prompt.get("verificationURI")
    print(f"To log in, open {uri} and enter the code {prompt.get('userCode')}", file=sys.stderr, flush=True)


# -- command line -------------------------------------------------------------------------------

def _describe(status: dict) -> str:
    group, state = status.get("group"), status.get("state")
    if state == "valid":
        until = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(status.get("sessionExpiresAt", 0)))
        return f"{group}: logged in as {status.get('username', '?')}, session valid until {until}"
    if state == "expired":
        return f"{group}: session expired"
    return f"{group}: not logged in"


def main(argv: list[str] | None = None) -> int:
    import argparse
    import getpass

    # The common options are accepted before or after the verb ("--json status" and "status --json").
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--socket", default=argparse.SUPPRESS,
                        help="the broker's socket (default: $MSSO_SOCKET or $XDG_RUNTIME_DIR/msso/broker.sock)")
    common.add_argument("--group", default=argparse.SUPPRESS,
                        help="the access group (default: the only configured one)")
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the result as JSON")
    parser = argparse.ArgumentParser(prog="msso_client.py", description="Talk to the msso broker.", parents=[common])
    verbs = parser.add_subparsers(dest="verb", required=True)

    def verb(name, help):
        return verbs.add_parser(name, help=help, parents=[common])

    verb("status", "every group's session")
    verb("check", "exit 0 when logged in, 1 when expired, 2 when not logged in")
    sign = verb("sign", "print the headers that authenticate a request")
    sign.add_argument("url")
    sign.add_argument("--method", default="GET")
    sign.add_argument("--header", action="append", default=[], metavar="'NAME: VALUE'")
    sign.add_argument("--body-file", help="the request body, to bind the signature to it")
    login = verb("login", "log in with a password (read from stdin or the terminal), or --device")
    login.add_argument("username", nargs="?")
    login.add_argument("--device", action="store_true")
    verb("extend", "slide the session window")
    logout = verb("logout", "end the session")
    logout.add_argument("--all", action="store_true")
    verb("watch", "print the broker's signals until interrupted")
    options = parser.parse_args(argv)
    for name, default in (("socket", None), ("group", None), ("json", False)):
        if not hasattr(options, name):
            setattr(options, name, default)

    def show(value, text):
        print(json.dumps(value, indent=2) if options.json else text)

    try:
        with MSSOClient(options.socket) as msso:
            if options.verb == "status":
                groups = msso.status(options.group)
                show({"groups": groups}, "\n".join(map(_describe, groups)))
            elif options.verb == "check":
                status = msso.check(options.group)
                show(status, _describe(status))
                return {"valid": 0, "expired": 1}.get(status.get("state"), 2)
            elif options.verb == "sign":
                if any(":" not in header for header in options.header):
                    parser.error("sign: a --header is 'NAME: VALUE'")
                headers = [tuple(part.strip() for part in h.split(":", 1)) for h in options.header]
                body = open(options.body_file, "rb").read() if options.body_file else None
                signed = msso.sign(options.method, options.url, headers, body, options.group)
                show({"headers": [list(h) for h in signed]}, "\n".join(f"{n}: {v}" for n, v in signed))
            elif options.verb == "login":
                if options.device:
                    status = msso.login_device(options.group)
                elif not options.username:
                    parser.error("login: give a USERNAME, or --device")
                else:
                    password = (getpass.getpass(f"Password for {options.username}: ") if sys.stdin.isatty()
                                else sys.stdin.readline().rstrip("\n"))
                    status = msso.login_password(options.username, password, options.group)
                show(status, _describe(status))
            elif options.verb == "extend":
                status = msso.extend(options.group)
                show(status, _describe(status))
            elif options.verb == "logout":
                groups = msso.logout(options.group, all=options.all)
                show({"loggedOut": groups},
                     f"Logged out of {', '.join(groups)}." if groups else "No SSO session was active.")
            elif options.verb == "watch":
                groups = msso.subscribe([options.group] if options.group else None)
                print(f"Watching {', '.join(groups)} (Ctrl-C to stop).", file=sys.stderr, flush=True)
                while True:
                    event = msso.next_event()
                    if options.json:
                        print(json.dumps(event.raw), flush=True)
                    else:
                        print(f"{event.name}: {_describe(event.status or {'group': event.group})}", flush=True)
    except MSSOError as error:
        print(f"msso_client.py: {error.name}: {error.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
