"""msso's benchmark: how much a call costs beside a floor that contains none of the broker, how big
mssod is, and how fast the commands start. Run by scripts/bench (`make bench`), which builds the
release binaries and the C tools first.

Everything runs against the real parts, as the tests do (a private keyring, a local glewlwyd,
mssod as a separate process):
- (a) the transport floor: a C server that answers each frame with a canned frame the size of a
  real sign reply (bench/echo.c), measured with the very client that measures (b) and (c), in
  turns with them (ten rounds, each a tenth of the calls of each), so that all three see the same
  drift of the machine's speed; for every latency figure the client runs on one CPU and the
  servers on another (`placed`), so that every server pays the same wake-up across CPUs;
- (b) `ping` and (c) `sign` for each signing profile, from a Python client written from
  docs/PROTOCOL.md (JSON encode, frame, JSON decode: the work any client does) and from a C client
  that does no JSON work of its own (bench/load.c), which shows the server's own cost;
- (c') the bearer `sign` of the Python library (clients/python, `msso.Client.sign`), in the same
  turns, beside the hand-written client of (b) and (c): what the library's thread safety, timeouts
  and reconnection cost an app;
- (c'') the bearer `sign` with sessions in the kernel keyring (a broker with no session bus);
- a bearer `sign` from a remote host through an SSH forward (`msso ssh`, ssh played by
  bench/forward-standin, which measures on the forward socket from a process the forward admits),
  beside a `ping` through the same forward, with the C client;
- the same for Go (bench/go, built by scripts/bench as `goclient`): the Go floor (a minimal Go
  client written from docs/PROTOCOL.md against the same echo server), that client's bearer `sign`,
  and the Go library's (clients/go, `msso.Client.Sign`), in turns in one process;
- (c''') the bearer `sign` of the C library (clients/c, `msso_sign` and `msso_headers_free`:
  bench/libsign.c), beside the C floor (load.c against echo.c, no JSON work at all);
- (a') the same floor plus the kernel work of per-call identity (`echo --identify`: the connecting
  process's pidfd, /proc directory and address space taken at accept; per call, recvmsg with the
  sender's credentials, its pid compared with the connection's, its address space checked, its
  executable statx'ed through that directory), what every mssod call pays before any broker code
  runs (docs/SECURITY.md);
- throughput with 1, 8 and 32 connections (C client), beside both floors and beside the identity
  floor served from one thread in epoll (`echo --identify --one-thread`), as mssod's one reactor
  serves: the ceiling of what mssod can answer on one thread;
- mssod's RSS idle, logged in (with a registration added while it ran, as by `msso apps allow`), and
  with 1,000 connections;
- keyring calls (counted on the session bus) and tokens the IdP issued (counted in its database)
  during the sign runs: a fresh-token sign must make neither;
- whole-process `msso check`, `msso sign`, `msso token` and `git credential fill` through
  git-credential-msso, beside `true`, started by the same spawner (bench/spawn.c).

Each figure is printed beside its target; the exit status is 1 when a target is not met.
"""
import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import sqlite3
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "Tests" / "e2e"))
sys.path.insert(0, str(ROOT / "clients" / "python" / "src"))

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--daemon", required=True, help="directory of the release mssod")
parser.add_argument("--clients", required=True, help="directory of the release msso and git-credential-msso")
parser.add_argument("--tools", required=True, help="directory of the compiled bench tools (echo, load, spawn, libsign)")
parser.add_argument("--calls", type=int, default=20000, help="sequential calls per latency figure")
parser.add_argument("--seconds", type=float, default=3.0, help="seconds per throughput figure")
parser.add_argument("--spawns", type=int, default=300, help="runs per whole-process figure")
options = parser.parse_args()

os.environ["MSSO_BIN"] = options.daemon  # the harness starts this mssod
import harness  # noqa: E402 (needs MSSO_BIN first)
from harness import GROUP, PYTHON, Broker, Desktop, IdP  # noqa: E402

import msso  # noqa: E402 (the Python library, clients/python)

TOOLS = Path(options.tools)
MSSO = Path(options.clients) / "msso"
GOCLIENT = TOOLS / "goclient"  # bench/go: the Go floor and the Go library's sign
HELPER = Path(options.clients) / "git-credential-msso"
PROFILES = {"bearer": GROUP, "dpop": "bench.dpop", "http-signature": "bench.http-signature",
            "dpop+http-signature": "bench.dpop-http-signature"}
URL = "https://api.example.com/v1/items?page=2"
RESOURCE = "https://api.example.com/"
PER_RESOURCE = "bench.per-resource"
results: list[tuple[str, str, str, bool]] = []  # what, figure, target, met


def report(what, figure, target, met):
    results.append((what, figure, target, met))


# -- the Python client: what any client written from PROTOCOL.md does ---------------------------

class Client:
    def __init__(self, path, hello=True):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(str(path))
        self.serial = 0
        if hello:
            self.call("hello", {"version": 1, "client": "bench"})

    def call(self, method, args):
        self.serial += 1
        payload = json.dumps({"type": "call", "serial": self.serial, "method": method, "args": args}).encode()
        self.sock.sendall(struct.pack(">I", len(payload)) + payload)
        (length,) = struct.unpack(">I", self.read(4))
        return json.loads(self.read(length))

    def read(self, n):
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data


LIBRARY = "library"  # in a run, instead of hello: the Python library's client (which says hello itself)


class LibraryClient:
    """The Python library behind the same interface: a `sign` call goes through `msso.Client.sign`,
    as an app makes it."""

    def __init__(self, path):
        self.client = msso.Client(path, client="bench")

    def call(self, method, args):
        assert method == "sign", method
        self.client.sign(args["method"], args["url"], group=args.get("group"))
        return {"type": "reply"}


def percentiles(samples):
    samples.sort()
    return samples[len(samples) // 2], samples[len(samples) * 99 // 100]


def python_latency(path, method, args, calls, hello=True):
    return interleaved_latency([(path, method, args, hello)], calls)[0]


def interleaved_latency(runs, calls, rounds=10):
    """p50 and p99 of each run (path, method, args, hello), measured in turns of calls/rounds calls
    each: a virtual machine's speed drifts, and figures to be divided must see the same drift.
    `hello` LIBRARY: the run's calls go through the Python library."""
    clients = [LibraryClient(path) if hello == LIBRARY else Client(path, hello) for path, _, _, hello in runs]
    samples = [[] for _ in runs]
    for client, (_, method, args, _) in zip(clients, runs):
        for _ in range(calls // 10):
            client.call(method, args)
    for _ in range(rounds):
        for client, (_, method, args, _), taken in zip(clients, runs, samples):
            for _ in range(calls // rounds):
                started = time.perf_counter_ns()
                answer = client.call(method, args)
                taken.append((time.perf_counter_ns() - started) / 1000)
            assert answer.get("type") == "reply", answer
    return [percentiles(taken) for taken in samples]


@contextlib.contextmanager
def placed(server_pids):
    """The client (and the C clients it starts) on one CPU and the servers on another, for the
    latency runs. Left to the scheduler, which CPU a server wakes on changes from run to run, and
    on a virtual machine a wake-up across CPUs costs more than the call itself: a floor that got
    the cheap same-CPU wake-up and a sign that did not would compare luck. Placed, every server
    pays the same crossing."""
    cpus = os.sched_getaffinity(0)
    if len(cpus) < 2:
        yield
        return
    client_cpu, server_cpu = sorted(cpus)[:2]

    def threads():
        return [int(tid) for pid in server_pids for tid in os.listdir(f"/proc/{pid}/task")]

    for tid in threads():
        os.sched_setaffinity(tid, {server_cpu})
    os.sched_setaffinity(0, {client_cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, cpus)
        for tid in threads():
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(tid, cpus)


def frame_file(directory, name, method, args):
    payload = json.dumps({"type": "call", "serial": 2, "method": method, "args": args}).encode()
    path = directory / name
    path.write_bytes(struct.pack(">I", len(payload)) + payload)
    return path


def c_latency(path, frame, calls):
    out = subprocess.run([TOOLS / "load", "latency", str(path), str(calls), str(frame)], capture_output=True, text=True, check=True)
    p50, p99 = map(float, out.stdout.split())
    return p50, p99


def library_latency(path, group, calls):
    """p50 and p99 of libmsso's bearer sign (bench/libsign.c)."""
    out = subprocess.run([TOOLS / "libsign", str(path), str(calls), group, URL], capture_output=True, text=True, check=True)
    p50, p99 = map(float, out.stdout.split())
    return p50, p99


def c_throughput(path, frame, clients, seconds):
    out = subprocess.run([TOOLS / "load", "throughput", str(path), str(clients), str(seconds), str(frame)],
                         capture_output=True, text=True, check=True)
    return float(out.stdout)


def rss_kb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])


def memory_kb(pid):
    """What the process's memory costs the machine, in KiB: VmRSS (every page it has resident,
    shared libraries' pages whole), Pss (shared pages divided among the processes that map them)
    and Private_Dirty (pages only it holds and has written: what it alone adds)."""
    figures = {"VmRSS": rss_kb(pid)}
    for line in open(f"/proc/{pid}/smaps_rollup"):
        key, _, rest = line.partition(":")
        if key in ("Pss", "Private_Dirty"):
            figures[key] = int(rest.split()[0])
    return figures


def memory_line(label, figures):
    return f"{label}: RSS {figures['VmRSS'] / 1024:.1f} MB, Pss {figures['Pss'] / 1024:.1f} MB, Private_Dirty {figures['Private_Dirty'] / 1024:.1f} MB"


def spawn(*argv, stdin=None, env=None):
    command = [str(TOOLS / "spawn"), str(options.spawns)] + (["--stdin", str(stdin)] if stdin else []) + [str(a) for a in argv]
    out = subprocess.run(command, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    ms, kb = out.stdout.split()
    return float(ms), int(kb)


class BusCounter:
    """Counts calls to the Secret Service on the session bus, from outside the daemon."""

    def __init__(self, address):
        self.process = subprocess.Popen(["dbus-monitor", "--address", address, "type='method_call'"],
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        time.sleep(0.5)

    def stop(self):
        self.process.terminate()
        lines = self.process.communicate(timeout=10)[0].splitlines()
        return sum(1 for line in lines if line.startswith("method call") and "org.freedesktop.Secret" in line)


def tokens_issued(idp):
    with sqlite3.connect(idp.dir / "glewlwyd.db") as db:
        return db.execute("SELECT count(*) FROM gpo_access_token").fetchone()[0]


def main():
    work = Path(tempfile.mkdtemp(prefix="msso-bench-"))
    desktop = Desktop()
    idp = IdP(resources=[RESOURCE])
    groups = {name: {"sign": profile, "refresh_lead": "30s"} for profile, name in PROFILES.items()}
    # A token minted for the one server of its `resources` (RFC 8707 at glewlwyd: a device login).
    groups[PER_RESOURCE] = {"sign": "bearer", "refresh_lead": "30s", "resources": [RESOURCE], "tokens": "per-resource"}
    # At the log level a user runs it at (the tests' broker logs every call at debug).
    # mssod and msso side by side, as installed: mssod counts the msso beside it as the user's own
    # tool, the only caller `forward` (msso ssh) answers.
    installed = work / "bin"
    installed.mkdir()
    for binary in (Path(options.daemon) / "mssod", Path(options.daemon) / "mssod-idp", MSSO):
        shutil.copy2(binary, installed / binary.name)
    broker = Broker(desktop, idp, groups=groups, args=["--idle-timeout", "3600"], start=False,
                    environment={"MSSO_LOG_LEVEL": "info"}, admin_files=False, executable=installed / "mssod")
    servers, holders = [], []  # the floors' servers; the processes holding 1,000 connections
    try:
        broker.register("bench", [PYTHON, TOOLS / "load", TOOLS / "libsign", MSSO, HELPER, GOCLIENT], list(groups))
        broker.start()
        pid = broker.process.pid
        time.sleep(1)
        idle_memory = memory_kb(pid)
        idle = idle_memory["VmRSS"]
        # As after a user's `msso apps allow`: a registration written while mssod runs, which it
        # reads again on a thread of its own.
        broker.register("late", ["/usr/bin/true"], list(groups))
        for name in PROFILES.values():
            done = subprocess.run([MSSO, "login", "--group", name, "--username", "alice", "--password-stdin"],
                                  input="alice-pass\n", env=broker.env, capture_output=True, text=True)
            assert done.returncode == 0, done.stderr
        device = broker.device_login(idp, group=PER_RESOURCE, binary=MSSO)
        assert device.returncode == 0, device.stderr

        sign = {"method": "GET", "url": URL}
        signed = {profile: {**sign, "group": name} for profile, name in PROFILES.items()}
        body_sign = {"group": PROFILES["http-signature"], "method": "POST", "url": URL,
                     "headers": [["Content-Type", "application/json"]], "bodySHA256": "RBNvo1WzZ4oRRq0W9+hknpT7T8If536DEMBg9hyq/4o="}
        reply = Client(broker.socket).call("sign", signed["bearer"])
        (work / "reply").write_bytes(json.dumps(reply).encode())
        echo_path = work / "echo.sock"
        echo = subprocess.Popen([TOOLS / "echo", echo_path, work / "reply"])
        servers.append(echo)
        harness.wait_for(echo_path.exists, what="the echo server")
        identify_path = work / "identify.sock"
        servers.append(subprocess.Popen([TOOLS / "echo", "--identify", identify_path, work / "reply"]))
        harness.wait_for(identify_path.exists, what="the identifying echo server")
        one_thread_path = work / "one-thread.sock"
        servers.append(subprocess.Popen([TOOLS / "echo", "--identify", "--one-thread", one_thread_path, work / "reply"]))
        harness.wait_for(one_thread_path.exists, what="the one-thread identifying echo server")

        # Every profile signs once first: a key is loaded from the keyring at its first use.
        warm = Client(broker.socket)
        for profile, arguments in signed.items():
            assert warm.call("sign", body_sign if profile == "http-signature" else arguments)["type"] == "reply", profile
        # The per-resource group's first sign mints its token: one round trip to the IdP, and a keyring write.
        per_resource = {**sign, "group": PER_RESOURCE}
        started = time.perf_counter_ns()
        assert warm.call("sign", per_resource)["type"] == "reply"
        first_mint = (time.perf_counter_ns() - started) / 1e6
        print(f"The first sign of a per-resource group (it mints the token): {first_mint:.1f} ms")

        calls = options.calls
        keyring = BusCounter(desktop.bus_address)
        issued_before = tokens_issued(idp)

        # Latency, with the client and the servers each on a CPU of their own (see placed).
        with placed([pid] + [server.pid for server in servers]):
            # (a), (b), (c) from the Python client
            floor, ping, bearer, library, minted = interleaved_latency([(echo_path, "sign", signed["bearer"], False),
                                                                        (broker.socket, "ping", {"data": "x"}, True),
                                                                        (broker.socket, "sign", signed["bearer"], True),
                                                                        (broker.socket, "sign", signed["bearer"], LIBRARY),
                                                                        (broker.socket, "sign", per_resource, True)], calls)
            print(f"Python client ({calls} sequential calls each), p50 / p99 in µs:")
            print(f"  (a) echo floor               {floor[0]:7.1f} / {floor[1]:7.1f}")
            print(f"  (b) ping                     {ping[0]:7.1f} / {ping[1]:7.1f}   {ping[0] / floor[0]:.2f}× floor")
            print(f"  (c) sign, bearer             {bearer[0]:7.1f} / {bearer[1]:7.1f}   {bearer[0] / floor[0]:.2f}× floor")
            print(f"  (c') sign, bearer, library   {library[0]:7.1f} / {library[1]:7.1f}   {library[0] / floor[0]:.2f}× floor, "
                  f"{library[0] / bearer[0]:.2f}× the hand-written client")
            print(f"  (c'') sign, per-resource     {minted[0]:7.1f} / {minted[1]:7.1f}   {minted[0] / floor[0]:.2f}× floor, "
                  f"{minted[0] / bearer[0]:.2f}× the shared token's")
            report("bearer sign p50 vs the echo floor", f"{bearer[0] / floor[0]:.2f}×", "≤ 2×", bearer[0] <= 2 * floor[0])
            report("per-resource sign p50 (a minted token held) vs the shared token's", f"{minted[0] / bearer[0]:.2f}×", "≤ 1.1×",
                   minted[0] <= 1.1 * bearer[0])
            report("bearer sign p99 vs the echo floor", f"{bearer[1] / floor[0]:.2f}×", "≤ 5×", bearer[1] <= 5 * floor[0])
            report("the Python library's bearer sign p50 vs the hand-written client", f"{library[0] / bearer[0]:.2f}×", "≤ 1.2×",
                   library[0] <= 1.2 * bearer[0])
            report("the Python library's bearer sign p50 vs the echo floor", f"{library[0] / floor[0]:.2f}×", "≤ 2×",
                   library[0] <= 2 * floor[0])
            # The same in Go: its floor, a minimal client's sign and the library's, in turns.
            go = json.loads(subprocess.run([GOCLIENT, echo_path, broker.socket, PROFILES["bearer"], URL, str(calls)],
                                           env=broker.env, capture_output=True, text=True, check=True).stdout)
            print(f"Go client ({calls} sequential calls each), p50 / p99 in µs:")
            print(f"  (a) echo floor               {go['floor'][0]:7.1f} / {go['floor'][1]:7.1f}")
            print(f"  (c) sign, bearer             {go['sign'][0]:7.1f} / {go['sign'][1]:7.1f}   "
                  f"{go['sign'][0] / go['floor'][0]:.2f}× floor")
            print(f"  (c') sign, bearer, library   {go['library'][0]:7.1f} / {go['library'][1]:7.1f}   "
                  f"{go['library'][0] / go['floor'][0]:.2f}× floor, {go['library'][0] / go['sign'][0]:.2f}× the hand-written client")
            report("the Go library's bearer sign p50 vs the hand-written Go client", f"{go['library'][0] / go['sign'][0]:.2f}×",
                   "≤ 1.2×", go['library'][0] <= 1.2 * go['sign'][0])
            report("the Go library's bearer sign p50 vs the Go echo floor", f"{go['library'][0] / go['floor'][0]:.2f}×", "≤ 2×",
                   go['library'][0] <= 2 * go['floor'][0])
            print("Python client, the other profiles:")
            for profile in ("dpop", "http-signature", "dpop+http-signature"):
                arguments = body_sign if profile == "http-signature" else signed[profile]
                figure = python_latency(broker.socket, "sign", arguments, calls // 4)
                print(f"  (c) sign, {profile:20s}{figure[0]:7.1f} / {figure[1]:7.1f}   {figure[0] / floor[0]:.2f}× floor")
                if profile != "dpop+http-signature":
                    report(f"{profile} sign p50", f"{figure[0]:.0f} µs", "≤ 200 µs", figure[0] <= 200)

            # The server's own cost: a client with no JSON work.
            call_frame = frame_file(work, "sign", "sign", signed["bearer"])
            ping_frame = frame_file(work, "ping", "ping", {"data": "x"})
            c_floor = c_latency(echo_path, call_frame, calls)
            c_identify = c_latency(identify_path, call_frame, calls)
            c_ping = c_latency(broker.socket, ping_frame, calls)
            c_sign = c_latency(broker.socket, call_frame, calls)
            c_library = library_latency(broker.socket, GROUP, calls)
            print(f"C client ({calls} sequential calls each), p50 / p99 in µs:")
            print(f"  (a) echo floor               {c_floor[0]:7.1f} / {c_floor[1]:7.1f}")
            print(f"  (a') echo + identity         {c_identify[0]:7.1f} / {c_identify[1]:7.1f}")
            print(f"  (b) ping                     {c_ping[0]:7.1f} / {c_ping[1]:7.1f}")
            print(f"  (c) sign, bearer             {c_sign[0]:7.1f} / {c_sign[1]:7.1f}   the broker's own cost: {c_sign[0] - c_floor[0]:.1f} µs")
            print(f"  (c''') sign, bearer, libmsso {c_library[0]:7.1f} / {c_library[1]:7.1f}   {c_library[0] / c_floor[0]:.2f}× the C floor, "
                  f"{c_library[0] / c_sign[0]:.2f}× the bare C client")
            report("libmsso's bearer sign p50 vs the C echo floor", f"{c_library[0] / c_floor[0]:.2f}×", "≤ 2×",
                   c_library[0] <= 2 * c_floor[0])

        print(f"Throughput, C client, one connection per client, {options.seconds:g} s each (calls/s):")
        for clients in (1, 8, 32):
            echo_rate = c_throughput(echo_path, call_frame, clients, options.seconds)
            identify_rate = c_throughput(identify_path, call_frame, clients, options.seconds)
            one_thread_rate = c_throughput(one_thread_path, call_frame, clients, options.seconds)
            sign_rate = c_throughput(broker.socket, call_frame, clients, options.seconds)
            print(f"  {clients:2d} clients   echo {echo_rate:9.0f}   echo + identity {identify_rate:9.0f}"
                  f"   the same, one thread {one_thread_rate:9.0f}   sign {sign_rate:9.0f}")
            if clients == 32:
                report("bearer sign throughput, 32 clients",
                       f"{sign_rate:.0f}/s (echo + identity: {identify_rate:.0f}/s, on one thread: {one_thread_rate:.0f}/s)",
                       "≥ 78,000/s (3× 26,000)", sign_rate >= 78_000)

        keyring_calls = keyring.stop()
        issued = tokens_issued(idp) - issued_before
        print(f"During the sign runs: {keyring_calls} keyring calls, {issued} tokens issued by the IdP")
        report("no keyring or IdP call on the hot path", f"{keyring_calls} and {issued}", "0 and 0", keyring_calls == 0 and issued == 0)

        logged_in_memory = memory_kb(pid)
        logged_in = logged_in_memory["VmRSS"]
        for _ in range(4):
            holder = subprocess.Popen([TOOLS / "load", "hold", str(broker.socket), "250"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True)
            holders.append(holder)
            assert holder.stdout.readline().strip() == "250"
        time.sleep(1)
        crowded_memory = memory_kb(pid)
        crowded = crowded_memory["VmRSS"]
        for holder in holders:
            holder.stdin.close()
            holder.wait()
        print(f"mssod RSS: {idle / 1024:.1f} MB idle, {logged_in / 1024:.1f} MB logged in (5 groups, one with a minted token, a registration added), "
              f"{crowded / 1024:.1f} MB with 1,000 connections")
        for label, figures in [("mssod idle", idle_memory), ("mssod logged in", logged_in_memory),
                               ("mssod with 1,000 connections", crowded_memory)]:
            print(memory_line(label, figures))
        # 18 MB, not the 20 it was: a link order gone stale (bench/mssod.order; `make order` traces it
        # again) measured 18.5-19.0 MB against 17.3 fresh, and should fail here, not pass silently.
        report("mssod RSS logged in, idle", f"{logged_in / 1024:.1f} MB", "≤ 18 MB", logged_in <= 18 * 1024)
        report("mssod RSS with 1,000 connections", f"{crowded / 1024:.1f} MB", "≤ 40 MB", crowded <= 40 * 1024)

        # The same sign with sessions in the kernel keyring (no session bus at all, as over SSH):
        # the sign path reads neither store, so it should cost the same.
        session = Desktop(bus=False)
        kernel_broker = Broker(session, idp, groups={GROUP: {}}, start=False, environment={"MSSO_LOG_LEVEL": "info"},
                               admin_files=False, executable=broker.executable)
        try:
            kernel_broker.register("bench", [PYTHON, MSSO], [GROUP])
            kernel_broker.start()
            done = subprocess.run([MSSO, "login", "--group", GROUP, "--username", "alice", "--password-stdin"],
                                  input="alice-pass\n", env=kernel_broker.env, capture_output=True, text=True)
            assert done.returncode == 0, done.stderr
            with placed([kernel_broker.process.pid]):
                kernel = python_latency(kernel_broker.socket, "sign", signed["bearer"], calls)
            print(f"Python client, sessions in the kernel keyring ({calls} sequential calls), p50 / p99 in µs:")
            print(f"  (c'') sign, bearer           {kernel[0]:7.1f} / {kernel[1]:7.1f}   {kernel[0] / floor[0]:.2f}× floor")
            report("bearer sign p50 vs the echo floor, kernel keyring", f"{kernel[0] / floor[0]:.2f}×", "≤ 2×", kernel[0] <= 2 * floor[0])
            subprocess.run([MSSO, "logout", "--group", GROUP], env=kernel_broker.env, capture_output=True)  # root's keyring left clean
        finally:
            kernel_broker.stop()
            session.cleanup()

        # A sign from a remote host through an SSH forward (`msso ssh`, ssh played by a stand-in that
        # measures on the forward socket as a remote program would), beside a ping through it.
        with open(broker.config, "a") as config:
            config.write(f'\n[forward."bench-host"]\ngroups = ["{GROUP}"]\nverbs = ["sign"]\nconfirm = false\n')
        reloads = broker.logged("configuration reloaded")
        broker.process.send_signal(signal.SIGHUP)
        harness.wait_for(lambda: broker.logged("configuration reloaded") > reloads, what="mssod to read the forward table")
        measured = subprocess.run([installed / "msso", "ssh", "-q", "--ssh", str(ROOT / "bench" / "forward-standin"), "bench-host"],
                                  env=dict(broker.env, MSSO_BENCH_LOAD=str(TOOLS / "load"), MSSO_BENCH_CALLS=str(calls),
                                           MSSO_BENCH_PING=str(ping_frame), MSSO_BENCH_SIGN=str(call_frame)),
                                  capture_output=True, text=True)
        assert measured.returncode == 0, measured.stderr
        (forward_ping, forward_sign) = [tuple(map(float, line.split())) for line in measured.stdout.splitlines()[:2]]
        print("C client through an SSH forward (msso ssh), p50 / p99 in µs:")
        print(f"  ping (the forward's floor)   {forward_ping[0]:7.1f} / {forward_ping[1]:7.1f}")
        print(f"  sign, bearer                 {forward_sign[0]:7.1f} / {forward_sign[1]:7.1f}   {forward_sign[0] / forward_ping[0]:.2f}× its ping")
        report("bearer sign through an SSH forward, p50 vs a ping through it", f"{forward_sign[0] / forward_ping[0]:.2f}×", "≤ 2×",
               forward_sign[0] <= 2 * forward_ping[0])

        # Whole processes, from the same spawner.
        env = dict(broker.env, HOME=str(work), GIT_TERMINAL_PROMPT="0", PATH=f"{options.clients}:{os.environ['PATH']}")
        (work / "credential").write_text("protocol=https\nhost=git.example.com\n\n")
        true = spawn("true", env=env)
        figures = {
            "msso check": spawn(MSSO, "check", "--group", GROUP, env=env),
            "msso sign": spawn(MSSO, "sign", "--group", GROUP, "--url", URL, env=env),
            "msso token": spawn(MSSO, "token", "--group", GROUP, env=env),
            "git credential fill": spawn("git", "-c", f"credential.helper=msso --group {GROUP}", "credential", "fill",
                                         stdin=work / "credential", env=env),
        }
        print(f"Whole processes ({options.spawns} runs each), p50 and peak RSS:")
        print(f"  true                  {true[0]:6.2f} ms  {true[1] / 1024:5.1f} MB")
        for name, (ms, kb) in figures.items():
            print(f"  {name:21s} {ms:6.2f} ms  {kb / 1024:5.1f} MB   {ms / true[0]:.1f}× true")
        for name in ("msso check", "msso sign"):
            ms, kb = figures[name]
            report(f"{name}, whole process, vs true", f"{ms / true[0]:.1f}×", "≤ 4×", ms <= 4 * true[0])
            report(f"{name}, peak RSS", f"{kb / 1024:.1f} MB", "≤ 12 MB", kb <= 12 * 1024)
    finally:
        for process in servers + holders:
            process.kill()
        broker.stop()
        idp.cleanup()
        desktop.cleanup()

    print("Targets:")
    for what, figure, target, met in results:
        print(f"  {'met    ' if met else 'NOT MET'}  {what}: {figure} (target {target})")
    return 0 if all(met for *_, met in results) else 1


sys.exit(main())
