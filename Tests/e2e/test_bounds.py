"""A hostile client against the daemon's bounds (ServerLimits): floods that must neither grow its
memory without limit nor keep anybody else waiting.

Each flood runs against a real mssod (with tightened options where that keeps the test short) and
prints its figures (run with -s): mssod's memory before, at its peak and after (VmRSS, VmHWM from
/proc/PID/status) and how long a legitimate `msso check` from another process took meanwhile.
"""
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from harness import GROUP, PYTHON, SECRETS, Broker, RawClient, frame, memory, unread, wait_for

URL = "https://api.example.com/items"
MIB = 1024


def mib(kib):
    return f"{kib / MIB:.0f} MiB"


def legit_check(broker, expect=0):
    """A legitimate `msso check` from another process: its exit status and how long it took."""
    started = time.monotonic()
    done = broker.msso("check", timeout=30)
    took = time.monotonic() - started
    assert done.returncode == expect, (done.returncode, done.stdout, done.stderr)
    return took


def call(serial, method, args):
    return frame(json.dumps({"type": "call", "serial": serial, "method": method, "args": args}).encode())


def assert_served(broker):
    """A fresh connection is answered at once, sign included."""
    started = time.monotonic()
    other = RawClient(broker.socket, timeout=3)
    try:
        assert other.call("ping", {"data": "other"})["result"] == {"data": "other"}
        signed = other.call("sign", {"method": "GET", "url": URL})
        assert signed["type"] == "reply", signed
        SECRETS.add(signed["result"]["headers"][0][1].split(" ", 1)[1])
    finally:
        other.close()
    assert time.monotonic() - started < 1


def settle(pid, start_rss, slack, seconds=12):
    """Waits (mssod trims its heap every 5 s) until VmRSS is within `slack` KiB of `start_rss`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if memory(pid)["VmRSS"] <= start_rss + slack:
            break
        time.sleep(0.25)
    return memory(pid)


@pytest.fixture
def logged_in(desktop, idp, request):
    """mssod (with the options a test gives by indirect parametrization), alice logged in."""
    daemon = Broker(desktop, idp, args=getattr(request, "param", ()))
    try:
        assert daemon.login().returncode == 0
        yield daemon
    finally:
        daemon.stop()


def run_child(script, *argv, executable=None):
    """A helper process (Python) with its stdout as a pipe and its stdin held open."""
    return subprocess.Popen([str(executable or sys.executable), "-c", script, *map(str, argv)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def read_json_line(child, timeout=60):
    """The child's next line, a JSON object (or a failure with its stderr)."""
    result = {}

    def read():
        result["line"] = child.stdout.readline()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    line = result.get("line")
    if not line:
        child.kill()
        pytest.fail(f"helper process said nothing in {timeout} s: {child.stderr.read()[-2000:]}")
    return json.loads(line)


# -- 1. pipelined calls whose replies are never read ---------------------------------------------

def test_100000_pipelined_signs_whose_replies_are_never_read(logged_in):
    """Attack: one connection pipelines 100,000 `sign` calls and never reads a reply (each reply
    carries a token: several times the size of its call). Expected: the daemon stops reading that
    connection once its replies back up (it answers at most what fits under the high-water mark),
    so its memory stays bounded (peak < 150 MB); a legitimate `msso check` from another process
    answers in < 1 s throughout; once the connection closes, memory comes back near the start."""
    broker = logged_in
    pid = broker.process.pid
    start = memory(pid)
    client = RawClient(broker.socket)
    calls = b"".join(call(serial, "sign", {"method": "GET", "url": URL}) for serial in range(2, 100_002))
    written = [0]

    def flood():
        sock = client.sock
        sock.setblocking(False)
        view, last_progress = memoryview(calls), time.monotonic()
        while written[0] < len(calls) and time.monotonic() - last_progress < 2:
            try:
                written[0] += sock.send(view[written[0]:written[0] + 65536])
                last_progress = time.monotonic()
            except BlockingIOError:
                time.sleep(0.01)

    flooder = threading.Thread(target=flood)
    flooder.start()
    checks = []
    while flooder.is_alive():
        checks.append(legit_check(broker))
        time.sleep(0.2)
    flooder.join()
    for _ in range(3):
        checks.append(legit_check(broker))
    during = memory(pid)
    taken = written[0] // (len(calls) // 100_000)
    client.close()
    after = settle(pid, start["VmRSS"], 16 * MIB)
    print(f"\n100,000 pipelined signs, never read: {taken:,} calls got into the socket before the daemon stopped "
          f"reading; mssod VmRSS {mib(start['VmRSS'])} before, {mib(during['VmRSS'])} during, peak (VmHWM) "
          f"{mib(during['VmHWM'])}, {mib(after['VmRSS'])} after the close; legit check {len(checks)}x, "
          f"slowest {max(checks):.3f} s")
    assert during["VmHWM"] < 150 * MIB
    assert taken < 100_000, "the daemon read every call of a peer that reads nothing"
    assert max(checks) < 1, checks
    assert after["VmRSS"] < start["VmRSS"] + 16 * MIB, "memory did not come back after the connection closed"
    assert_served(broker)


FLOODER = r"""
import json, socket, struct, sys, time
path, count = sys.argv[1], int(sys.argv[2])
def frame(p): return struct.pack(">I", len(p)) + p
hello = frame(json.dumps({"type": "call", "serial": 1, "method": "hello", "args": {"version": 1}}).encode())
calls = b"".join(frame(json.dumps({"type": "call", "serial": n, "method": "sign",
                                   "args": {"method": "GET", "url": "https://api.example.com/items"}}).encode())
                 for n in range(2, 3002))
socks = []
for _ in range(count):
    s = socket.socket(socket.AF_UNIX); s.connect(path); s.sendall(hello); socks.append(s)
def read_exactly(s, n):
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk: return None
        data += chunk
    return data
for s in socks:  # until the daemon has answered every hello
    s.settimeout(10)
    head = read_exactly(s, 4)
    if head: read_exactly(s, struct.unpack(">I", head)[0])
print("{}", flush=True)
pending = {s: memoryview(calls) for s in socks}
for s in socks: s.setblocking(False)
last = time.monotonic()
while pending and time.monotonic() - last < 2:
    for s in list(pending):
        try:
            sent = s.send(pending[s][:65536])
        except BlockingIOError:
            continue
        except OSError:
            del pending[s]; continue
        last = time.monotonic()
        pending[s] = pending[s][sent:]
        if not pending[s]: del pending[s]
    time.sleep(0.005)
print("{}", flush=True)
sys.stdin.readline()
"""


def test_pipelined_signs_never_read_on_128_connections_of_one_process(logged_in):
    """Attack: one process opens 128 connections (half its share) and pipelines 3,000 `sign`
    calls on each, reading nothing. Expected: memory bounded (< 150 MB), and a legitimate `msso
    check` from another process answers in < 1 s throughout: a turn reads at most about 512
    bytes (or one whole frame) of a connection, the rest waits in the kernel's buffer, and a
    connection that took its whole share waits behind quiet ones, at most 8 of them served
    between two looks at epoll. (Reading whatever had arrived let each flooding connection take
    up to 256 KiB of replies before pausing: other clients waited about 3 s on the debug build;
    serving all 128 in every round before a quiet peer's next step, 0.7-1.2 s; now about 0.05.)"""
    broker = logged_in
    pid = broker.process.pid
    start = memory(pid)
    flooder = run_child(FLOODER, broker.socket, 128)
    try:
        read_json_line(flooder)  # connected and greeted
        # Checks throughout the flood: until the flooder says the daemon stopped reading them all.
        said = []
        stalled = threading.Thread(target=lambda: said.append(read_json_line(flooder)))
        stalled.start()
        checks = []
        while stalled.is_alive() or len(checks) < 3:
            checks.append(legit_check(broker))
            time.sleep(0.2)  # pace, not order
        stalled.join()
        assert said == [{}], "the flooder never said the daemon stopped reading"
        peak = memory(pid)
        print(f"\n128 connections pipelining signs, never read: mssod VmRSS {mib(start['VmRSS'])} before, peak "
              f"{mib(peak['VmHWM'])}; legit check {len(checks)}x: {[round(c, 2) for c in checks]} s")
        assert peak["VmHWM"] < 150 * MIB
        assert max(checks) < 1, checks
        assert sorted(checks)[len(checks) // 2] < 0.3, f"quiet peers first: the median check {checks}"
    finally:
        flooder.kill()
        flooder.wait()


# -- 2. big pings from an unregistered program ---------------------------------------------------

PINGER = r"""
import json, socket, struct, sys, threading, time
path, count, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def frame(p): return struct.pack(">I", len(p)) + p
s = socket.socket(socket.AF_UNIX); s.connect(path)
def read_exactly(n):
    data = b""
    while len(data) < n:
        chunk = s.recv(min(n - len(data), 1 << 20))
        if not chunk: return None
        data += chunk
    return data
def receive():
    head = read_exactly(4)
    if head is None: return None
    return json.loads(read_exactly(struct.unpack(">I", head)[0]))
s.sendall(frame(json.dumps({"type": "call", "serial": 1, "method": "hello", "args": {"version": 1}}).encode()))
hello = receive()
data = "p" * size
result = {"hello": hello["type"], "replies": 0, "wrong": 0}
def reader():
    for _ in range(count):
        m = receive()
        if m is None: break
        if m.get("type") == "reply" and len(m["result"]["data"]) == size: result["replies"] += 1
        else: result["wrong"] += 1
started = time.monotonic()
t = threading.Thread(target=reader); t.start()
for serial in range(2, count + 2):
    s.sendall(frame(json.dumps({"type": "call", "serial": serial, "method": "ping", "args": {"data": data}}).encode()))
t.join()
result["seconds"] = time.monotonic() - started
print(json.dumps(result), flush=True)
"""


def test_10000_pings_of_60_kb_from_an_unregistered_program(logged_in, tmp_path):
    """Attack: a program no registration names (a copy of the Python interpreter elsewhere) sends
    10,000 `ping` calls of 60 KB each (600 MB in, 600 MB out; ping needs no entitlement).
    Expected: every ping is answered with its data; mssod's memory stays bounded (peak < 150
    MB); a legitimate `msso check` from another process answers in < 1 s meanwhile."""
    broker = logged_in
    pid = broker.process.pid
    unregistered = tmp_path / "pinger"
    shutil.copy2(PYTHON, unregistered)
    start = memory(pid)
    pinger = run_child(PINGER, broker.socket, 10_000, 60_000, executable=unregistered)
    checks = []
    while pinger.poll() is None:
        checks.append(legit_check(broker))
        time.sleep(0.2)
    result = read_json_line(pinger)
    during = memory(pid)
    after = settle(pid, start["VmRSS"], 16 * MIB)
    print(f"\n10,000 pings of 60 KB from {unregistered.name}: {result['replies']:,} answered in "
          f"{result['seconds']:.1f} s ({result['replies'] * 60_000 / result['seconds'] / 1e6:.0f} MB/s each way); "
          f"mssod VmRSS {mib(start['VmRSS'])} before, peak {mib(during['VmHWM'])}, {mib(after['VmRSS'])} after; "
          f"legit check {len(checks)}x, slowest {max(checks):.3f} s")
    assert result == {"hello": "reply", "replies": 10_000, "wrong": 0, "seconds": result["seconds"]}
    assert during["VmHWM"] < 150 * MIB
    assert max(checks) < 1, checks
    assert_served(broker)


# -- 3. partial frames held open -----------------------------------------------------------------

# 65,535 bytes of a 65,536-byte frame (a 4-byte length announcing 65,532, then all but the last byte).
HOLDER = r"""
import json, select, socket, struct, sys, time
path, count = sys.argv[1], int(sys.argv[2])
partial = struct.pack(">I", 65532) + b"x" * 65531
def messages(data):
    out = []
    while len(data) >= 4:
        n = struct.unpack(">I", data[:4])[0]
        if len(data) < 4 + n: break
        out.append(json.loads(data[4:4 + n])); data = data[4 + n:]
    return out
socks = []
for _ in range(count):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
    except OSError:
        continue
    s.setblocking(False)
    try:
        s.send(partial)
    except OSError:
        pass
    socks.append(s)
sent = time.monotonic()
time.sleep(0.5)
kept, refused, refusals = [], 0, {}
for s in socks:
    try:
        data = s.recv(65536)
    except BlockingIOError:
        kept.append(s); continue
    except OSError:
        data = b""
    refused += 1
    for m in messages(data):
        refusals[m.get("error", "?")] = refusals.get(m.get("error", "?"), 0) + 1
    s.close()
print(json.dumps({"kept": len(kept), "refused": refused, "refusals": refusals}), flush=True)
buffers = {s.fileno(): b"" for s in kept}
kept_by_fd = {s.fileno(): s for s in kept}
closed = {}
poller = select.poll()
for s in kept:
    poller.register(s, select.POLLIN)
deadline = time.monotonic() + 20
while len(closed) < len(kept) and time.monotonic() < deadline:
    for fd, _ in poller.poll(500):
        try:
            chunk = kept_by_fd[fd].recv(65536)
        except OSError:
            chunk = b""
        if chunk:
            buffers[fd] += chunk
        else:
            closed[fd] = time.monotonic() - sent
            poller.unregister(fd)
ends = {}
for s in kept:
    found = messages(buffers[s.fileno()])
    key = ",".join(f"{m.get('error')}@{m.get('serial')}" for m in found) + ("+EOF" if s.fileno() in closed else "+open")
    ends[key] = ends.get(key, 0) + 1
times = sorted(closed.values())
print(json.dumps({"ends": ends, "first": times[0] if times else None, "last": times[-1] if times else None}), flush=True)
sys.stdin.readline()
"""


@pytest.mark.parametrize("logged_in", [["--frame-timeout", "2", "--hello-timeout", "30"]], indirect=True,
                         ids=["frame-timeout-2"])
def test_4000_connections_each_holding_most_of_a_large_frame(logged_in):
    """Attack: 16 processes open 250 connections each (4,000) and on each send 65,535 bytes of a
    65,536-byte frame, then wait. Expected: the daemon keeps at most 1,024 connections, at most
    256 per process, and refuses the rest with a Busy error; its memory stays bounded (< 150 MB,
    and only the 64 connections holding a large-frame slot hold more than 4 KiB each);
    a legitimate `msso check` gets an answer within 1 s throughout (while the cap is full, that
    answer may be a refusal); with --frame-timeout 2 every partial frame is closed on time, each
    with a TimedOut error (serial 0), then the end of the stream; after that `msso check` works.
    (Each helper process starts watching for the timeout as soon as it has reported.)"""
    broker = logged_in
    pid = broker.process.pid
    start = memory(pid)
    holders = [run_child(HOLDER, broker.socket, 250) for _ in range(16)]
    try:
        opened = [read_json_line(holder) for holder in holders]
        held = memory(pid)
        kept = sum(o["kept"] for o in opened)
        refusals = {}
        for o in opened:
            for name, count in o["refusals"].items():
                refusals[name] = refusals.get(name, 0) + count
        checks, outcomes = [], []
        for _ in range(3):
            started = time.monotonic()
            done = broker.msso("check", timeout=30)
            checks.append(time.monotonic() - started)
            outcomes.append(f"exit {done.returncode}" + (f" ({done.stderr.strip()})" if done.returncode else ""))
        print(f"\n4,000 partial frames from 16 processes: kept {kept}, per process {[o['kept'] for o in opened]}, "
              f"refused {sum(o['refused'] for o in opened)} {refusals}; mssod VmRSS {mib(start['VmRSS'])} before, "
              f"{mib(held['VmRSS'])} holding them, peak {mib(held['VmHWM'])}; legit check meanwhile: "
              f"{[round(c, 3) for c in checks]} s, {sorted(set(outcomes))}")
        ended = [read_json_line(holder) for holder in holders]
        ends = {}
        for e in ended:
            for key, count in e["ends"].items():
                ends[key] = ends.get(key, 0) + count
        first = min(e["first"] for e in ended if e["first"] is not None)
        last = max(e["last"] for e in ended if e["last"] is not None)
        print(f"frame timeout 2 s: {ends}; closed {first:.2f} to {last:.2f} s after the partial frames were sent")
        after = memory(pid)
        check_after = legit_check(broker)
        print(f"after: mssod VmRSS {mib(after['VmRSS'])}; legit check {check_after:.3f} s")

        assert kept <= 1024 and all(o["kept"] <= 256 for o in opened)
        assert kept >= 1024 - 8, "the daemon kept fewer connections than its cap"  # a few may be the checks'
        assert set(refusals) == {"Busy"}, refusals
        # 64 large-frame slots of 64 KiB and 4 KiB for every other connection: about 8 MiB of frames.
        # (Reading first and asking for a slot after let each of the 1,024 hold 64 KiB: 64 MiB.)
        assert held["VmHWM"] - start["VmHWM"] < 32 * MIB, "partial frames are held beyond the large-frame slots"
        assert held["VmHWM"] < 150 * MIB
        assert max(checks) < 1, checks
        # Refused, the user reads why (the daemon's Busy frame), not "the connection was lost".
        assert all(o == "exit 0" or ("exit 3" in o and "its limit" in o) for o in outcomes), outcomes
        assert ends == {"TimedOut@0+EOF": kept}, ends
        assert 1.5 <= first and last < 6, (first, last)
        assert check_after < 1
        assert_served(broker)
    finally:
        for holder in holders:
            holder.kill()
            holder.wait()


def test_a_large_frame_waiting_for_a_slot_goes_on_when_one_frees(logged_in):
    """Attack (by others): 64 connections take every large-frame slot with half-sent 20 KB
    frames. An honest client's 20 KB call arrives in two halves meanwhile: it must wait, since no
    slot is free. Expected: once the 64 hang up, the honest client's call is read and answered at
    once, not left paused until the frame timeout closes it."""
    broker = logged_in
    whole = call(2, "ping", {"data": "z" * 20_000})
    hogs = [RawClient(broker.socket) for _ in range(64)]
    for hog in hogs:
        hog.send_raw(whole[:10_000])
    wait_for(lambda: not any(unread(hog.sock) for hog in hogs), what="the daemon to read the hogs' halves")
    honest = RawClient(broker.socket)
    honest.send_raw(whole[:10_000])
    # The daemon reads the honest half's head and finds no slot free: nothing outside shows that
    # moment (the half stays unread), so this one waits by the clock.
    time.sleep(0.3)
    assert unread(honest.sock), "the honest half was read while every slot was taken"
    for hog in hogs:
        hog.close()
    # A slot frees: the daemon goes on reading the honest half (a frame left paused would stay
    # unread until the frame timeout closed the connection: then the reply below is missing).
    wait_for(lambda: not unread(honest.sock), timeout=15, what="the daemon to read the honest half")
    started = time.monotonic()
    honest.send_raw(whole[10_000:])
    honest.sock.settimeout(15)
    answer = honest.receive()
    took = time.monotonic() - started
    print(f"\na large frame that waited for a slot: {answer and answer['type']} {took:.2f} s after its last byte")
    assert answer is not None and answer["type"] == "reply", answer and {k: answer[k] for k in answer if k != "result"}
    assert answer["result"]["data"] == "z" * 20_000
    assert took < 1


# -- 4. idle connections -------------------------------------------------------------------------

@pytest.mark.parametrize("logged_in", [["--idle-timeout", "2"]], indirect=True, ids=["idle-timeout-2"])
def test_idle_connections_are_closed_but_a_subscriber_stays(logged_in):
    """Attack: connections that say hello and then nothing, holding a slot each. Expected: with
    --idle-timeout 2 each is sent a TimedOut error (serial 0) and closed after about 2 s of
    idleness; a connection that subscribed stays (it is waiting for signals, not idle), and one
    that keeps calling stays too."""
    broker = logged_in
    idle = [RawClient(broker.socket) for _ in range(5)]
    subscriber = RawClient(broker.socket)
    assert subscriber.call("subscribe", {})["type"] == "reply"
    busy = RawClient(broker.socket)
    greeted = time.monotonic()
    ends = []

    def wait_end(client):
        client.sock.settimeout(6)
        try:
            message = client.receive()
            after = client.receive() if message else None
        except (socket.timeout, ConnectionResetError) as error:
            message, after = repr(error), "error"
        ends.append((time.monotonic() - greeted, message, after))

    waiters = [threading.Thread(target=wait_end, args=(client,)) for client in idle]
    for waiter in waiters:
        waiter.start()
    while time.monotonic() - greeted < 3.5:
        assert busy.call("ping", {"data": "busy"})["type"] == "reply"
        time.sleep(0.5)
    for waiter in waiters:
        waiter.join(timeout=10)
    print(f"\nidle timeout 2 s: idle connections closed after {sorted(round(e[0], 2) for e in ends)} s")
    assert len(ends) == 5
    for elapsed, message, after in ends:
        assert isinstance(message, dict) and message["type"] == "error", message
        assert (message["serial"], message["error"]) == (0, "TimedOut") and "idle" in message["message"], message
        assert after is None, "not closed after the error"
        assert 1.5 <= elapsed < 4, elapsed
    # The subscriber is still there, and still hears signals.
    assert subscriber.call("ping", {"data": "here"})["result"] == {"data": "here"}
    assert broker.msso("extend").returncode == 0
    subscriber.sock.settimeout(3)
    signal = subscriber.receive()
    assert signal and signal.get("signal") == "Extended", signal


# -- 5. one process, thousands of connections ----------------------------------------------------

GREETER = r"""
import json, socket, struct, sys, time
path, count = sys.argv[1], int(sys.argv[2])
payload = json.dumps({"type": "call", "serial": 1, "method": "hello", "args": {"version": 1}}).encode()
hello = struct.pack(">I", len(payload)) + payload
def receive(s):
    data = b""
    while True:
        try:
            chunk = s.recv(4096)
        except OSError:
            chunk = b""
        if not chunk: return None, data
        data += chunk
        if len(data) >= 4 and len(data) >= 4 + struct.unpack(">I", data[:4])[0]:
            return json.loads(data[4:4 + struct.unpack(">I", data[:4])[0]]), data
kept, outcomes = [], {}
started = time.monotonic()
for _ in range(count):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(5)
    try:
        s.connect(path)
        s.sendall(hello)
    except OSError as e:
        pass
    message, _ = receive(s)
    if message and message["type"] == "reply":
        kept.append(s); key = "reply"
    else:
        key = (message or {}).get("error", "no answer")
        s.close()
    outcomes[key] = outcomes.get(key, 0) + 1
print(json.dumps({"outcomes": outcomes, "seconds": time.monotonic() - started}), flush=True)
sys.stdin.readline()
"""

APP = r"""
import json, socket, struct, sys
s = socket.socket(socket.AF_UNIX); s.settimeout(5); s.connect(sys.argv[1])
def call(serial, method, args):
    p = json.dumps({"type": "call", "serial": serial, "method": method, "args": args}).encode()
    s.sendall(struct.pack(">I", len(p)) + p)
    while True:
        head = s.recv(4, socket.MSG_WAITALL)
        body = s.recv(struct.unpack(">I", head)[0], socket.MSG_WAITALL)
        m = json.loads(body)
        if m.get("type") != "signal": return m
call(1, "hello", {"version": 1})
print(json.dumps(call(2, "sign", {"method": "GET", "url": "https://api.example.com/items"})), flush=True)
"""


def test_10000_greeted_connections_from_one_process(logged_in, tmp_path):
    """Attack: one process opens 10,000 connections one after another and says hello on each,
    keeping every one the daemon accepts. Expected: it keeps 256 (its share); every other one gets
    a Busy error naming the limit and is closed; a legitimate `msso check` answers in < 1 s while
    they are held; afterwards an app registered only now (`msso apps allow`) can sign."""
    broker = logged_in
    pid = broker.process.pid
    start = memory(pid)
    greeter = run_child(GREETER, broker.socket, 10_000)
    try:
        result = read_json_line(greeter, timeout=120)
        held = memory(pid)
        checks = [legit_check(broker) for _ in range(3)]
        print(f"\n10,000 greeted connections from one process: {result['outcomes']} in {result['seconds']:.1f} s; "
              f"mssod VmRSS {mib(start['VmRSS'])} before, {mib(held['VmRSS'])} holding them, peak "
              f"{mib(held['VmHWM'])}; legit check {[round(c, 3) for c in checks]} s")
        assert result["outcomes"] == {"reply": 256, "Busy": 10_000 - 256}, result["outcomes"]
        assert max(checks) < 1
        assert held["VmHWM"] < 150 * MIB
    finally:
        greeter.kill()
        greeter.wait()
    app = tmp_path / "newapp"
    shutil.copy2(PYTHON, app)
    allowed = broker.msso("apps", "allow", app, "--group", GROUP)
    assert allowed.returncode == 0, allowed.stderr
    signer = run_child(APP, broker.socket, executable=app)
    answer = read_json_line(signer, timeout=30)
    signer.wait(timeout=10)
    assert answer["type"] == "reply", answer
    SECRETS.add(answer["result"]["headers"][0][1].split(" ", 1)[1])


# -- 6. one frame, two writers -------------------------------------------------------------------

def test_a_frame_finished_by_another_process_is_refused(logged_in):
    """Attack: a process writes half a `sign` call on its connection; another process (a child
    that inherited the socket by fork) writes the rest, so that the call would be judged as the
    first one's. Expected: the frame is refused with Forbidden (serial 0) saying it was written by
    more than one process; the connection stays usable for whole frames afterwards."""
    broker = logged_in
    client = RawClient(broker.socket)
    whole = call(7, "sign", {"method": "GET", "url": URL})
    client.send_raw(whole[:30])
    wait_for(lambda: not unread(client.sock), what="the daemon to read the first half, from this process")
    child = os.fork()
    if child == 0:  # the second writer
        try:
            client.sock.sendall(whole[30:])
            os._exit(0)
        finally:
            os._exit(1)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    answer = client.receive()
    print(f"\na frame finished by another process: {answer}")
    assert answer["type"] == "error" and (answer["serial"], answer["error"]) == (0, "Forbidden"), answer
    assert "written by more than one process" in answer["message"]
    client.serial = 7
    assert client.call("ping", {"data": "whole"})["result"] == {"data": "whole"}
    signed = client.call("sign", {"method": "GET", "url": URL})
    assert signed["type"] == "reply", signed
    SECRETS.add(signed["result"]["headers"][0][1].split(" ", 1)[1])


# -- 7. a reply longer than its call -------------------------------------------------------------

def test_a_ping_whose_echo_would_outgrow_the_frame_cap_is_answered_with_its_serial(logged_in):
    """Attack: a `ping` whose data is 30,000 backspaces written `\\b` (two bytes each, 60 KB: within
    the cap). Written back as `\\u0008` (six bytes each) they would be 180 KB, over the cap.
    Expected: the call is answered with its own serial, with its echo (the daemon escapes each
    character in JSON's shortest form), so a pipelining client is never left waiting."""
    client = RawClient(logged_in.socket)
    client.send_raw(frame(b'{"type":"call","serial":9,"method":"ping","args":{"data":"' + b"\\b" * 30000 + b'"}}'))
    answer = client.receive()
    print(f"\na ping of 30,000 backspaces: {answer if answer['type'] == 'error' else 'its echo'}")
    assert answer["serial"] == 9, answer
    assert answer["type"] == "reply" and answer["result"]["data"] == "\b" * 30000
    assert_served(logged_in)


# -- 8. DPoP nonces from a registered app --------------------------------------------------------

NONCE_FLOODER = r"""
import json, socket, struct, sys
path, count, size, prefix, window = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], 16
s = socket.socket(socket.AF_UNIX); s.connect(path)
def frame(p): return struct.pack(">I", len(p)) + p
def read_exactly(n):
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk: raise SystemExit("closed")
        data += chunk
    return data
def receive():
    while True:
        m = json.loads(read_exactly(struct.unpack(">I", read_exactly(4))[0]))
        if m.get("type") != "signal": return m
def call(serial, method, args):
    return frame(json.dumps({"type": "call", "serial": serial, "method": method, "args": args}).encode())
s.sendall(call(1, "hello", {"version": 1})); receive()
outcomes, messages = {}, set()
serial = 1
while serial <= count:
    batch = range(serial + 1, min(serial + window, count + 1) + 1)
    # A new origin and a new nonce every time: the map the nonces were kept in had no cap.
    s.sendall(b"".join(call(n, "sign", {"method": "GET", "url": f"https://{prefix}{n}.example/items",
                                        "dpopNonce": (f"{n}-" + "n" * size)[:size]}) for n in batch))
    for _ in batch:
        m = receive()
        key = m["type"] if m["type"] == "reply" else m["error"]
        outcomes[key] = outcomes.get(key, 0) + 1
        if m["type"] == "error": messages.add(m["message"])
    serial += len(batch)
print(json.dumps({"outcomes": outcomes, "messages": sorted(messages)}), flush=True)
"""


@pytest.fixture
def dpop_logged_in(desktop, idp):
    daemon = Broker(desktop, idp, groups={GROUP: {"sign": "dpop"}})
    try:
        assert daemon.login().returncode == 0
        yield daemon
    finally:
        daemon.stop()


def test_8000_signs_each_with_a_new_origin_and_a_60_kb_dpop_nonce(dpop_logged_in):
    """Attack (7a): a registered app of a `dpop` group sends 8,000 `sign` calls, each with a new
    origin and a 60 KB `dpopNonce`; then 8,000 more whose nonces are within the cap (512 bytes).
    Before: every nonce was kept, keyed by origin, with no cap (mssod 32 -> 514 MB, never given
    back). Expected: a nonce over 512 bytes is refused (BadRequest naming the cause) and never
    kept; the short ones are kept for at most 16 origins per group; mssod's memory stays within
    16 MiB of where it started."""
    broker = dpop_logged_in
    pid = broker.process.pid
    assert broker.msso("sign", "--url", URL).returncode == 0  # the key is made, the session loaded
    start = memory(pid)
    long_flood = read_json_line(run_child(NONCE_FLOODER, broker.socket, 8000, 60_000, "long"), timeout=300)
    after_long = memory(pid)
    short_flood = read_json_line(run_child(NONCE_FLOODER, broker.socket, 8000, 512, "short"), timeout=300)
    after = settle(pid, start["VmRSS"], 4 * MIB)
    bound = 16 * MIB
    print(f"\n8,000 signs with new origins and 60 KB nonces: {long_flood['outcomes']}; 8,000 with 512-byte nonces: "
          f"{short_flood['outcomes']}; mssod VmRSS {mib(start['VmRSS'])} before, {mib(after_long['VmRSS'])} after the "
          f"60 KB ones, {mib(after['VmRSS'])} after both, peak {mib(after['VmHWM'])} "
          f"(bound: {mib(start['VmRSS'] + bound)}, start + 16 MiB)")
    assert long_flood["outcomes"] == {"BadRequest": 8000}, long_flood
    assert any("DPoP nonce" in m and "at most 512 bytes" in m for m in long_flood["messages"]), long_flood["messages"]
    assert short_flood["outcomes"] == {"reply": 8000}, short_flood
    assert after_long["VmRSS"] < start["VmRSS"] + bound
    assert after["VmRSS"] < start["VmRSS"] + bound
    assert after["VmHWM"] < start["VmRSS"] + bound
    assert broker.msso("sign", "--url", URL).returncode == 0


# -- 9. replies never read, on a thousand connections ---------------------------------------------

PING_FLOODER = r"""
import json, socket, struct, sys, time
path, count, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
method = sys.argv[4] if len(sys.argv) > 4 else "ping"  # or "status": a call each answered by the broker
def frame(p): return struct.pack(">I", len(p)) + p
hello = frame(json.dumps({"type": "call", "serial": 1, "method": "hello", "args": {"version": 1}}).encode())
data = "p" * size
args = {"data": data} if method == "ping" else {}
pings = b"".join(frame(json.dumps({"type": "call", "serial": n, "method": method, "args": args}).encode())
                 for n in range(2, 2 + (1024 * 1024) // max(size, 64)))
socks = []
for _ in range(count):
    s = socket.socket(socket.AF_UNIX); s.connect(path); s.sendall(hello); socks.append(s)
for s in socks:  # hello's answer first (nothing may follow hello before it), then no more reading
    s.settimeout(10)
    head = b""
    while len(head) < 4: head += s.recv(4 - len(head))
    body = b""
    while len(body) < struct.unpack(">I", head)[0]: body += s.recv(struct.unpack(">I", head)[0] - len(body))
print("{}", flush=True)
pending = {s: memoryview(pings) for s in socks}
for s in socks: s.setblocking(False)
closed, last = 0, time.monotonic()
# Writes until nothing more goes in for 3 s (the daemon stopped reading every one), reading nothing.
while pending and time.monotonic() - last < 3:
    for s in list(pending):
        try:
            sent = s.send(pending[s][:65536])
        except BlockingIOError:
            continue
        except OSError:
            del pending[s]; closed += 1; continue
        last = time.monotonic()
        pending[s] = pending[s][sent:]
        if not pending[s]: del pending[s]
    time.sleep(0.005)
print(json.dumps({"closed": closed, "stalled": len(pending)}), flush=True)
sys.stdin.readline()
"""


@contextmanager
def flooding(broker, processes, *argv):
    """`processes` PING_FLOODER children (`argv`: connections each, the call's size, its method),
    a bystander's `msso check` every 0.2 s until each reports that the daemon stopped reading (or
    closed) all of its connections. Yields their reports and the checks' times; the flooders hold
    their connections until the block ends."""
    flooders = [run_child(PING_FLOODER, broker.socket, *argv) for _ in range(processes)]
    try:
        for flooder in flooders:
            read_json_line(flooder)  # connected and greeted
        outcomes = [None] * len(flooders)

        def collect(index):
            outcomes[index] = read_json_line(flooders[index], timeout=300)

        collectors = [threading.Thread(target=collect, args=(index,)) for index in range(len(flooders))]
        for collector in collectors:
            collector.start()
        checks = []
        while any(collector.is_alive() for collector in collectors):
            checks.append(legit_check(broker))
            time.sleep(0.2)  # pace, not order
        for collector in collectors:
            collector.join()
        yield outcomes, checks
    finally:
        for flooder in flooders:
            flooder.kill()
            flooder.wait()


def test_500_connections_pipelining_status_calls_hold_no_more_than_the_budgets(logged_in):
    """Found by an outside test: 1,000 connections pipelining `status` and `check`, read or not,
    grew mssod to 518 MB and slowed a bystander's `msso check` to 7.8 s: the cap on calls in flight
    was checked only between reads (hundreds of calls pipelined in one read each became a task),
    and a 60-byte call counted 60 bytes of the calls' budget. Expected: within one read the cap
    holds, each call counts at least 16 KiB, so mssod's peak stays within start + both budgets
    (16 MiB each) + 32 MiB (the connections' own state), and the bystander is answered."""
    broker = logged_in
    start = memory(broker.process.pid)
    with flooding(broker, 2, 250, 0, "status") as (_, checks):
        checks.append(legit_check(broker))
        peak = memory(broker.process.pid)
        bound = 16 * MIB + 16 * MIB + 32 * MIB
        print(f"\n500 connections pipelining status calls, never read: mssod VmRSS {mib(start['VmRSS'])} before, peak "
              f"{mib(peak['VmHWM'])} (bound: {mib(start['VmRSS'] + bound)}); legit check {len(checks)}x, slowest {max(checks):.3f} s")
        assert peak["VmHWM"] < start["VmRSS"] + bound
        assert max(checks) < 2, checks
        assert_served(broker)


def test_1020_connections_pipelining_pings_whose_replies_are_never_read(logged_in):
    """Attack (7b): four processes open 255 connections each (1,020) and pipeline 8 KB pings on
    every one, never reading a reply. Before: each connection could hold 256 KiB of replies, its
    own budget, so mssod grew by 300 MB and held it for up to 10 minutes. Expected: the replies
    waiting across all connections stay within the shared budget (16 MiB: past half of it a
    connection holding more than 16 KiB is no longer read, past all of it the biggest holders
    are closed), so mssod's peak stays within start + 16 MiB + 32 MiB (the connections' own
    state); and a legitimate `msso check` from another process answers meanwhile."""
    broker = logged_in
    start = memory(broker.process.pid)
    with flooding(broker, 4, 255, 8000) as (outcomes, checks):
        for _ in range(3):
            checks.append(legit_check(broker))
        peak = memory(broker.process.pid)
        bound = 16 * MIB + 32 * MIB
        print(f"\n1,020 connections pipelining 8 KB pings, never read: closed by the daemon "
              f"{sum(o['closed'] for o in outcomes)}, left unread {sum(o['stalled'] for o in outcomes)}; mssod VmRSS "
              f"{mib(start['VmRSS'])} before, {mib(peak['VmRSS'])} while held, peak {mib(peak['VmHWM'])} (bound: "
              f"{mib(start['VmRSS'] + bound)}, start + 16 MiB budget + 32 MiB); legit check {len(checks)}x, "
              f"slowest {max(checks):.3f} s")
        assert peak["VmHWM"] < start["VmRSS"] + bound
        assert max(checks) < 2, checks
        assert_served(broker)
