"""The blocking client: one connection to mssod, shared safely by threads."""
from __future__ import annotations

import collections
import os
import select
import socket
import struct
import threading
import time
import weakref
from typing import IO, Any, Callable, Iterable, Iterator, Mapping

from . import _wire
from ._wire import (AuditEntry, Broken, BrowserPrompt, DevicePrompt, Headers, KeyDescription, LockState, LogoutResult,
                    SessionStatus, Signal, Token)
from .errors import BrokerUnreachable, MSSOError, TimedOut

_DEFAULT: Any = object()
QUIET = 1.0   # seconds without a read after which a call first checks that the connection is still open
# SO_RCVTIMEO's timer may fire late: by two ticks (20 ms at 100 Hz), and a long one by up to an
# eighth more (the kernel's timer wheel is coarser for later timers).
_TIMER_LATE = 0.020
_TIMEVAL = struct.Struct("@ll")   # struct timeval
_clients: weakref.WeakSet[Client] = weakref.WeakSet()


def _forget_connections_after_fork() -> None:
    # A forked child must not write on its parent's socket (their frames would interleave, and the
    # daemon counts each frame's writer): it opens a connection of its own at its next call.
    for client in list(_clients):
        client._after_fork()


os.register_at_fork(after_in_child=_forget_connections_after_fork)


class Client:
    """One connection to the user's msso broker; `hello` is sent when it opens.

        with msso.Client() as broker:
            headers = broker.sign("GET", "https://api.example.com/items")

    Several threads may share one client: calls are matched to their replies by serial, and while
    they wait, whichever thread is waiting reads the socket for all of them (no thread of its own).
    A call that finds the connection gone (the daemon closes idle ones after 10 minutes, or it was
    restarted, or the process forked) opens a new one; a call in flight when it went fails with
    BrokerUnreachable, and so does `next_event` (subscribe again: subscriptions die with their
    connection). Every call is bounded by `timeout` seconds (None: none), except logins that wait
    for the user, which the daemon bounds.

    Whatever the broker sends, a call raises only this library's errors: a frame or an answer
    that is not the protocol is Internal, naming what, and closes the connection (the next call
    opens another). Signals are kept only once subscribed, at most 4,096 unread (1 MiB of them):
    past that the connection is closed and `next_event`, once it has given those, raises
    BrokerUnreachable saying so.

    `daemon`, `peer` and `version` hold the answer to the last hello: `peer` is how the daemon
    sees this process (uid, pid, executable: what registrations are matched against).

    `account`: which account of each group the calls act as (`msso login --account NAME`), unless
    a call names another: by default $MSSO_ACCOUNT, else None, the daemon's choice (the program's
    registration's `account`, else the group's default account). `status` lists every account
    unless the call names one, as `msso status` does.
    """

    def __init__(self, socket_path: str | os.PathLike[str] | None = None, *, client: str | None = None,
                 timeout: float | None = _wire.DEFAULT_TIMEOUT, connect: bool = True, account: str | None = None):
        self.socket_path = os.fspath(socket_path) if socket_path else _wire.default_socket_path()
        self.timeout = timeout
        self.account = account or _wire.default_account()
        self.label = client or _wire.default_label()
        self.daemon = ""
        self.peer: dict[str, Any] = {}
        self.version = _wire.PROTOCOL_VERSION
        self._new_state()
        _clients.add(self)
        if connect:
            with self._lock:
                self._connected()

    def _new_state(self) -> None:
        # The lock guards everything below; threads waiting for a reader sleep on the condition.
        # (A plain Lock, entered directly: this is the hot path of every call.)
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._sleepers = 0                      # threads waiting on the condition
        self._send_lock = threading.Lock()      # one frame at a time on the socket
        self._sock: socket.socket | None = None
        self._poll: Any = None
        self._recv_wait: float | None = None    # the socket's SO_RCVTIMEO in seconds (None: none)
        self._frames = _wire.Frames()
        self._chunk = memoryview(bytearray(_wire.MAX_FRAME + 4))
        self._serial = 0
        self._answers: dict[int, dict | MSSOError | None] = {}   # pending serial -> its answer, once here
        self._prompts: dict[int, collections.deque[dict]] = {}  # a login's DevicePrompt/BrowserPrompt
        self._signals: collections.deque[tuple[Signal, int]] = collections.deque()   # each with its frame's length
        self._signal_bytes = 0
        self._signals_ended: MSSOError | None = None            # the subscribed connection was lost
        self._subscribed = False
        self._subscribing: set[int] = set()                     # subscribe calls waiting: their signals may come first
        self._reading = False                                   # a waiting thread is reading for all
        self._stray: MSSOError | None = None                    # the last serial-0 error: why it closes
        self._closed = False                                    # close() was called
        self._last_read = 0.0                                   # time.monotonic() of the last read

    # -- the verbs -----------------------------------------------------------------------------------

    def ping(self, data: str = "") -> str:
        """The same data back: a round trip that touches no state."""
        return self._verb("ping", {"data": data}, _wire.ping_of)

    def status(self, group: str | None = None, *, account: str | None = None) -> list[SessionStatus]:
        """The SessionStatus of every account of the named group, or of every group this program
        may use (each with its `account`); of one account when the call names it and its group."""
        return self._verb("status", _wire.with_group({}, group, account), _wire.status_of)

    def check(self, group: str | None = None, *, account: str | None = None) -> SessionStatus:
        """The group's SessionStatus. A missing or expired session is a `state`, not an error."""
        return self._verb("check", _wire.with_group({}, group, self._account(account)), _wire.session_of)

    def sign(self, method: str, url: str, headers: Iterable[tuple[str, str]] | Mapping[str, str] | None = None,
             body: bytes | str | None = None, *, group: str | None = None, dpop_nonce: str | None = None,
             account: str | None = None) -> Headers:
        """The headers that authenticate the described request, per the group's signing profile.

        `headers`: those the request already has (an RFC 9421 profile covers content-type). `body`:
        sent as its SHA-256 only, for profiles that cover it. `dpop_nonce`: the `DPoP-Nonce` a
        server answered with (RFC 9449); the daemon keeps it for later proofs to that origin."""
        return self._verb("sign", _wire.sign_args(method, url, headers, body, group, dpop_nonce, self._account(account)),
                          _wire.headers_of)

    def token(self, *, group: str | None = None, renew: bool = False, resource: str | None = None,
              account: str | None = None) -> Token:
        """The access token itself (bearer groups only), for a program that cannot have each request
        signed. `resource`: the URL it will be sent to (required by a group that names `resources`).
        `renew`: refresh it first (a server refused it)."""
        return self._verb("token", _wire.token_args(group, renew, resource, self._account(account)), _wire.token_of)

    def login(self, username: str, password: str | IO[str], *, group: str | None = None,
              account: str | None = None) -> SessionStatus:
        """Logs in with the password grant. `password` is a string or a file to read one line from
        (e.g. sys.stdin); it crosses the socket once and is never stored."""
        return self._verb("login", _wire.password_login_args(username, password, group, self._account(account)),
                          _wire.session_of)

    def login_device(self, on_prompt: Callable[[DevicePrompt], None] = _wire.print_device_prompt, *,
                     group: str | None = None, timeout: float | None = None, account: str | None = None) -> SessionStatus:
        """Logs in with the device grant: `on_prompt` gets the address and code to show the user
        (printed to stderr by default); returns once they approved (LoginDenied if not)."""
        return self._verb("login", _wire.with_group({"flow": "device"}, group, self._account(account)), _wire.session_of,
                          timeout, on_prompt)

    def login_browser(self, on_prompt: Callable[[BrowserPrompt], None] = _wire.open_browser_prompt, *,
                      group: str | None = None, timeout: float | None = None, account: str | None = None) -> SessionStatus:
        """Logs in through a browser on this machine: `on_prompt` gets the URL to open (opened with
        `webbrowser` by default); returns once the browser came back."""
        return self._verb("login", _wire.with_group({"flow": "browser"}, group, self._account(account)), _wire.session_of,
                          timeout, on_prompt)

    def extend(self, group: str | None = None, *, account: str | None = None) -> SessionStatus:
        """Slides the session window (call it while the user is active)."""
        return self._verb("extend", _wire.with_group({}, group, self._account(account)), _wire.session_of)

    def logout(self, group: str | None = None, *, account: str | None = None, all: bool = False) -> LogoutResult:
        """Ends the session of the group's account (every account of every group with all=True)
        for every app. The result names the groups logged out (`sessions`: each with its account)
        and whether the identity provider revoked their tokens."""
        if all and account is not None:
            raise ValueError("logout: give an account or all=True, not both")
        return self._verb("logout", _wire.logout_args(group, all, self._account(account)), _wire.logout_of)

    def subscribe(self, groups: Iterable[str] | None = None, *, account: str | None = None) -> list[str]:
        """Asks for the groups' signals (all this program may use when none are named), of the
        client's account only when it has one (or of `account`); read them with `next_event` or
        `events`. Returns the groups now subscribed."""
        return self._verb("subscribe", _wire.subscribe_args(groups, self._account(account)), _wire.groups_of)

    def next_event(self, timeout: float | None = None) -> Signal | None:
        """The next signal, waiting at most `timeout` seconds (None: for ever); None on timeout.

        Raises BrokerUnreachable when the subscribed connection is lost or the client closed, and
        once the signals it kept are read, when it was closed for leaving too many unread."""
        def ready() -> Signal | None:
            if self._signals:
                signal, size = self._signals.popleft()
                self._signal_bytes -= size
                return signal
            if self._closed:
                raise BrokerUnreachable("this msso client was closed")
            if self._signals_ended:
                raise self._signals_ended.copy()
            return None
        return self._wait(ready, timeout)

    def events(self, groups: Iterable[str] | None = None, *, account: str | None = None) -> Iterator[Signal]:
        """Subscribes (now), then iterates over the signals as they come, until `close()`.

        Signals go to whoever reads them first: read them in one place per client."""
        self.subscribe(groups, account=account)

        def stream() -> Iterator[Signal]:
            while True:
                try:
                    event = self.next_event()
                except BrokerUnreachable:
                    if self._closed:
                        return
                    raise
                if event is not None:
                    yield event
        return stream()

    def keys(self, *, group: str | None = None, rotate: bool = False) -> KeyDescription:
        """The public half of the group's signing key (`rotate`: a new one). The user's own tools only."""
        return self._verb("keys", _wire.keys_args(group, rotate), _wire.key_of)

    def apps(self) -> dict[str, Any]:
        """The registrations in force and the caller as the daemon sees it. The user's own tools only."""
        return self._verb("apps", {}, _wire.object_of)

    def audit(self, *, group: str | None = None, since: float | None = None, limit: int | None = None) -> list[AuditEntry]:
        """The audit log, oldest first (the newest `limit`). The user's own tools only."""
        return self._verb("audit", _wire.audit_args(group, since, limit), _wire.entries_of)

    def diagnose(self) -> dict[str, Any]:
        """The daemon's side of `msso doctor`. The user's own tools only."""
        return self._verb("diagnose", {}, _wire.object_of)

    def lock(self, passphrase: str) -> LockState:
        """Locks the broker: nothing signs or hands out a token until `unlock` with the same passphrase."""
        return self._verb("lock", {"passphrase": passphrase}, _wire.lock_of, self._slow_timeout())

    def unlock(self, passphrase: str) -> LockState:
        """Lifts the lock. A wrong passphrase is answered late (up to a minute): Locked."""
        return self._verb("unlock", {"passphrase": passphrase}, _wire.lock_of, self._slow_timeout())

    def _slow_timeout(self) -> float | None:
        return None if self.timeout is None else max(self.timeout, _wire.SLOW_TIMEOUT)

    def _account(self, account: str | None) -> str | None:
        """The account a call acts as: the one it names, else the client's."""
        return account if account is not None else self.account

    def close(self) -> None:
        """Closes the connection: pending calls fail, `events` ends. Later calls fail too."""
        with self._lock:
            self._closed = True
            sock, self._sock = self._sock, None
            self._fail_pending(BrokerUnreachable("this msso client was closed"))
            self._cond.notify_all()
        if sock is not None:
            _shut(sock)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<msso.Client {self.socket_path!r}{' closed' if self._closed else ''}>"

    # -- calls and replies -----------------------------------------------------------------------------

    def call(self, method: str, args: Mapping[str, Any], *, timeout: float | None = _DEFAULT,
             on_prompt: Callable[[Any], None] | None = None) -> Any:
        """Any method by name: the reply's `result`, or the error it carries raised.

        The verbs above are thin wrappers; this is public for methods this library does not know.
        `timeout` defaults to the client's (None: wait for ever)."""
        return self._verb(method, args, None, timeout, on_prompt)

    def _verb(self, method: str, args: Mapping[str, Any], read: Callable[[Any], Any] | None,
              timeout: float | None = _DEFAULT, on_prompt: Callable[[Any], None] | None = None) -> Any:
        """A call whose result `read` checks and makes into what the verb returns."""
        if timeout is _DEFAULT:
            timeout = None if on_prompt else self.timeout
        try:
            return self._call(method, args, timeout, on_prompt, read)
        except TimedOut:
            # The daemon closed the connection for idleness (or for a frame that came too slowly)
            # before it read this call, so the call was not carried out: once more, on a new one.
            return self._call(method, args, timeout, on_prompt, read)

    def _call(self, method: str, args: Mapping[str, Any], timeout: float | None,
              on_prompt: Callable[[Any], None] | None, read: Callable[[Any], Any] | None = None) -> Any:
        with self._lock:
            sock = self._sock
            if sock is None or time.monotonic() - self._last_read > QUIET:
                sock = self._connected()
            serial = self._next_serial()
            self._answers[serial] = None
            if on_prompt:
                self._prompts[serial] = collections.deque(maxlen=_wire.PROMPTS_KEPT)
            if method == "subscribe":
                self._subscribing.add(serial)
        try:
            self._send(sock, _wire.frame(serial, method, args))
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                answer = self._answer(serial, deadline)
                if answer is None:
                    raise BrokerUnreachable(f"the msso broker did not answer {method} in time ({self.socket_path}); "
                                            "is mssod stuck? `systemctl --user restart msso.service`")
                if isinstance(answer, MSSOError):
                    raise answer
                if answer["type"] == "signal":   # this login's prompt (checked): show it, keep waiting
                    on_prompt(answer.get("prompt") or answer.get("browser"))  # type: ignore[misc]
                    continue
                result = _wire.result_of(answer)
                if read is None:
                    return result
                try:
                    return read(result)
                except Broken as broken:
                    raise self._broken(sock, f"an answer to {method} in which {broken}") from None
        finally:
            if serial in self._answers or serial in self._subscribing:   # gave up (timeout, an error in on_prompt)
                with self._lock:
                    # A reply that comes after we gave up finds no pending serial and is dropped.
                    self._answers.pop(serial, None)
                    self._prompts.pop(serial, None)
                    self._subscribing.discard(serial)

    def _broken(self, sock: socket.socket, what: str) -> MSSOError:
        """The broker sent something that is not the protocol: the connection is closed (the next
        call opens another), and this is the error its calls fail with."""
        error = _wire.broken_error(what, self.socket_path)
        with self._lock:
            self._lost(sock, error, ours=True)
            if self._sleepers:
                self._cond.notify_all()
        return error

    def _answer(self, serial: int, deadline: float | None) -> dict | MSSOError | None:
        """The call's answer (then forgotten) or its next prompt, reading the socket meanwhile if
        nobody else is; None once `deadline` (time.monotonic()) has passed. `_wait`, specialised:
        this is the path of every call."""
        answers, prompts = self._answers, self._prompts
        with self._lock:
            while True:
                answer = answers[serial]
                if answer is not None:
                    del answers[serial]
                    prompts.pop(serial, None)
                    return answer
                if prompts and prompts.get(serial):
                    return prompts[serial].popleft()
                remaining = None
                if deadline is not None:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return None
                self._take_turn(remaining)

    def _next_serial(self) -> int:
        # Unique among pending calls is all the protocol asks; wrapping after 2^32 - 1 is fine.
        serial = self._serial % _wire.MAX_SERIAL + 1
        while serial in self._answers:
            serial = serial % _wire.MAX_SERIAL + 1
        self._serial = serial
        return serial

    def _send(self, sock: socket.socket, frame: bytes) -> None:
        try:
            with self._send_lock:
                sock.sendall(frame)
        except OSError:
            # The daemon closed the connection: the reader will see the end, and the reason the
            # daemon gave before closing (Busy at its connection cap, say), and fail this call.
            pass

    def _wait(self, ready: Callable[[], Any], timeout: float | None) -> Any:
        """ready()'s first value other than None, reading the socket meanwhile; None after `timeout`.

        Leader/follower: a waiting thread that finds nobody reading becomes the reader and files
        every message it gets (answers by serial, signals in a queue) for all; the others sleep on
        the condition until something arrives."""
        deadline = None if timeout is None else time.monotonic() + timeout
        remaining = timeout
        with self._lock:
            while True:
                value = ready()
                if value is not None:
                    return value
                if deadline is not None:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return None
                self._take_turn(remaining)

    def _take_turn(self, remaining: float | None) -> None:
        """With the lock held: read the socket for everyone if nobody is (filing what comes, waking
        the sleepers), else sleep until something arrives or `remaining` seconds pass."""
        sock = self._sock
        if self._reading or sock is None:
            self._sleepers += 1
            try:
                self._cond.wait(remaining)
            finally:
                self._sleepers -= 1
            return
        self._reading = True
        self._lock.release()
        try:
            messages, ended = self._read(sock, remaining)
        finally:
            self._lock.acquire()
            self._reading = False
        self._file(sock, messages, ended)
        if self._sleepers:
            self._cond.notify_all()

    def _file(self, sock: socket.socket, messages: list[tuple[int, dict]], ended: MSSOError | None) -> None:
        """With the lock held: files what was read, in order, and ends the connection when it ended
        or must end (a frame that is not the protocol; signals left unread past the bound)."""
        ours = ended is not None and not isinstance(ended, BrokerUnreachable)   # (a lost one: the daemon may have said why)
        try:
            for size, message in messages:
                self._dispatch(size, message)
        except MSSOError as reason:
            ended, ours = reason, True
        if ended is not None:
            self._lost(sock, ended, ours)

    def _read(self, sock: socket.socket, timeout: float | None) -> tuple[list[tuple[int, dict]], MSSOError | None]:
        """What arrives within `timeout` (whole messages), and why the connection ended, if it did.

        It waits in a blocking recv, woken by the answer itself: poll and then recv cost a wake-up
        more (a quarter of a bearer sign on some machines, measured by `make bench`), as libmsso
        found. SO_RCVTIMEO is set short of the timeout by what its timer may be late; the last of
        the wait, if it comes to that, is polled (to the millisecond)."""
        try:
            wait = None if timeout is None else timeout - timeout / 8 - _TIMER_LATE
            if wait is None or wait > 0:
                self._wait_at_most(sock, wait)
                try:
                    count = sock.recv_into(self._chunk)
                except BlockingIOError:   # its SO_RCVTIMEO passed: the caller looks at the time again
                    return [], None
            elif not self._poll.poll(max(0, int(timeout * 1000) + (timeout > 0))):  # type: ignore[operator]
                return [], None
            else:
                count = sock.recv_into(self._chunk)
            self._last_read = time.monotonic()
        except (OSError, ValueError):   # ValueError: closed under us
            return [], _lost_connection()
        if count == 0:
            return [], _lost_connection()
        messages = self._frames.feed(self._chunk[:count].tobytes())
        if self._frames.broken is not None:   # the stream can no longer be trusted
            return messages, _wire.broken_error(str(self._frames.broken), self.socket_path)
        return messages, None

    def _wait_at_most(self, sock: socket.socket, seconds: float | None) -> None:
        """Lets a blocking recv wait about `seconds` at most (None: for ever): set only when that
        changes by more than the time between two calls, so that a client's calls, each with the
        same timeout, set it once."""
        now = self._recv_wait
        if now == seconds or (now is not None and seconds is not None and seconds - seconds / 16 - 0.001 <= now <= seconds):
            return
        wait = 0.0 if seconds is None else max(seconds - seconds / 32, 0.001)   # 0: no limit
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _TIMEVAL.pack(int(wait), int(wait % 1 * 1_000_000)))
        self._recv_wait = None if seconds is None else wait

    def _dispatch(self, size: int, message: dict) -> None:
        """Files one message (checked by Frames: its type, serial, names). Raises the error to end
        the connection with when it must end."""
        kind = message["type"]
        if kind == "reply" or kind == "error":
            serial = message["serial"]
            if serial in self._answers and self._answers[serial] is None:
                self._answers[serial] = message
                if serial in self._subscribing:   # subscribed from here on in the stream
                    self._subscribing.discard(serial)
                    if kind == "reply":
                        self._subscribed, self._signals_ended = True, None
            else:
                self._stray = _wire.stray_error(message) or self._stray
            # Anything else answers a call nobody waits for any more: dropped.
        elif message["signal"] in _wire.PROMPTS:
            prompts = self._prompts.get(message["serial"])
            if prompts is not None:
                try:
                    _wire.prompt_of(message)
                except Broken as broken:
                    raise _wire.broken_error(f"a {message['signal']} in which {broken}", self.socket_path) from None
                prompts.append(message)
        elif self._subscribed or self._subscribing:
            _wire.check_event_room(len(self._signals), self._signal_bytes, size)
            try:
                signal = _wire.signal_of(message)
            except Broken as broken:
                raise _wire.broken_error(f"a {message['signal']} signal in which {broken}", self.socket_path) from None
            self._signals.append((signal, size))
            self._signal_bytes += size
        # Signals nobody subscribed to are dropped: a broker that pushes them makes us hold nothing.

    # -- the connection --------------------------------------------------------------------------------

    def _connected(self) -> socket.socket:
        """The open socket, connecting (and saying hello) first if there is none. Holds the lock."""
        if self._closed:
            raise BrokerUnreachable("this msso client was closed")
        if self._sock is not None and not self._reading and time.monotonic() - self._last_read > QUIET:
            self._catch_up(self._sock)
        if self._sock is None:
            self._sock = self._open()
            self._poll = select.poll()
            self._poll.register(self._sock, select.POLLIN)
            self._recv_wait = None   # a new socket's reads wait for ever
            self._last_read = time.monotonic()
        return self._sock

    def _catch_up(self, sock: socket.socket) -> None:
        # Nobody read this socket for a while: the daemon may have closed it (idle, or restarted).
        # Read what is there without waiting, so that a call goes on a new connection rather than
        # fail on the dead one. Holds the lock (this read cannot block).
        while True:
            messages, ended = self._read(sock, 0)
            self._file(sock, messages, ended)
            if self._sock is not sock or not messages:
                break   # (a TimedOut message comes before the end of the stream: read on to see it)
        if self._sleepers:
            self._cond.notify_all()

    def _open(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)   # connect and hello only; then blocking, reads wait in recv
        try:
            try:
                sock.connect(self.socket_path)
            except TimeoutError:
                raise BrokerUnreachable(f"the msso broker did not accept the connection in {self.timeout} s "
                                        f"({self.socket_path}); is mssod stuck? `systemctl --user restart msso.service`") from None
            except PermissionError:
                raise BrokerUnreachable(f"no permission to talk to the msso broker at {self.socket_path}: "
                                        "it is another user's") from None
            except OSError:
                raise BrokerUnreachable(f"the msso broker is not running (nothing answers on {self.socket_path}); "
                                        "start it with `systemctl --user start msso.socket` or `mssod`") from None
            _wire.check_peer(sock, self.socket_path)
            serial = self._next_serial()
            frames = _wire.Frames()
            try:
                sock.sendall(_wire.frame(serial, "hello", {"version": _wire.PROTOCOL_VERSION, "client": self.label}))
                answer = None
                while answer is None:
                    chunk = sock.recv(_wire.MAX_FRAME + 4)
                    if not chunk:
                        raise self._stray or _lost_connection()
                    for _, message in frames.feed(chunk):
                        if message["type"] in ("reply", "error") and message["serial"] == serial:
                            answer = message
                        elif message["type"] != "signal":
                            self._stray = _wire.stray_error(message) or self._stray
                    if frames.broken is not None:
                        raise _wire.broken_error(str(frames.broken), self.socket_path)
                hello = _wire.hello_of(_wire.result_of(answer))
            except Broken as broken:
                raise _wire.broken_error(f"an answer to hello in which {broken}", self.socket_path) from None
            except TimeoutError:
                raise BrokerUnreachable(f"the msso broker did not answer hello in time ({self.socket_path}); "
                                        "is mssod stuck? `systemctl --user restart msso.service`") from None
            except OSError:
                raise self._stray or _lost_connection() from None
        except BaseException:
            sock.close()
            raise
        finally:
            self._stray = None
        sock.settimeout(None)
        self._frames = frames   # anything read past the hello reply stays for the reader
        self.version, self.daemon, self.peer = hello["version"], hello["daemon"], hello["peer"]
        return sock

    def _lost(self, sock: socket.socket, reason: MSSOError, ours: bool = False) -> None:
        """The connection ended (or `ours`: this library ends it): its pending calls fail, and its
        subscription ends. Holds the lock."""
        if sock is not self._sock:
            return   # closed or replaced already
        if not ours:
            reason = self._stray or reason   # what the daemon said before closing is the better reason
        self._sock, self._stray = None, None
        _shut(sock)
        self._fail_pending(reason)
        self._subscribing.clear()
        if self._subscribed:
            self._subscribed, self._signals_ended = False, reason

    def _fail_pending(self, reason: MSSOError) -> None:
        for serial, answer in self._answers.items():
            if answer is None:
                self._answers[serial] = reason.copy()

    def _after_fork(self) -> None:
        sock = self._sock
        subscribed, closed = self._subscribed, self._closed
        self._new_state()   # the parent's locks may have been held by a thread the child does not have
        self._closed = closed
        if subscribed:
            self._signals_ended = BrokerUnreachable("the process forked: the subscription stayed with the parent")
        if sock is not None:
            sock.close()    # the child's copy only; the parent's connection stays open


def _lost_connection() -> BrokerUnreachable:
    return BrokerUnreachable("the connection to the msso broker was lost; is mssod still running?")


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)   # wakes a thread blocked reading it
    except OSError:
        pass
    sock.close()
