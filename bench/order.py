"""Makes bench/mssod.order, the link order of mssod's functions (`make order`).

Why: a page of mssod's code that runs once stays resident, and the kernel maps a file's pages 64 KiB
at a time around each one touched (fault-around), so the 1.7 MB of code a broker runs, scattered
across a 20 MB binary, kept about 12 MB of it resident. Linked first and together (lld's
--symbol-ordering-file), the functions that run take about 4 MB less (docs/ARCHITECTURE.md,
"Where mssod's memory goes").

How: mssod runs under bench/trace (an int3 on every function, removed at its first hit) against the
real parts, through a broker's life: start, logins of four groups (one per signing profile), signs
from the commands and from protocol clients, the other verbs, a refresh, an event to a
subscriber, lock and unlock, a reload, a logout, a login again, and shutdown. The functions that ran
are written in address order (neighbours in the source stay neighbours). Names that no longer
exist in a later build are ignored by the linker; functions added since are placed after the
listed ones, so a stale order costs memory, never correctness.
"""
import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "Tests" / "e2e"))

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--daemon", required=True, help="the release mssod to trace")
parser.add_argument("--clients", required=True, help="directory of the release msso")
parser.add_argument("--tools", required=True, help="directory of the compiled bench tools (trace, load)")
parser.add_argument("--out", required=True, help="the order file to write")
options = parser.parse_args()

os.environ["MSSO_BIN"] = options.clients  # the harness's msso
import harness  # noqa: E402 (needs MSSO_BIN first)
from harness import GROUP, PYTHON, Broker, Desktop, IdP, RawClient  # noqa: E402

DAEMON = Path(options.daemon).resolve()
MSSO = Path(options.clients) / "msso"
TOOLS = Path(options.tools)
PROFILES = {"bearer": GROUP, "dpop": "order.dpop", "http-signature": "order.http-signature",
            "dpop+http-signature": "order.dpop-http-signature"}
URL = "https://api.example.com/v1/items?page=2"
PER_RESOURCE, RESOURCE = "order.per-resource", "https://api.example.com/"  # a token minted for its one server
REFRESHING = "order.refresh"  # a refresh lead as long as the token's life: its signs refresh


def functions(binary):
    """Every function of `binary` with a size: address → (size, names); aliases share an address."""
    out = subprocess.run(["nm", "--defined-only", "--print-size", binary], capture_output=True, text=True, check=True).stdout
    table = {}
    for line in out.splitlines():
        fields = line.split()
        if len(fields) == 4 and fields[2] in "tTwW" and int(fields[1], 16) > 0:
            size, names = table.setdefault(int(fields[0], 16), (int(fields[1], 16), []))
            names.append(fields[3])
    return table


def life(broker, idp):
    """What a broker does in a day, each verb at least once."""
    def msso(*argv, input=None):
        done = broker.msso(*argv, input=input)
        assert done.returncode == 0, f"msso {' '.join(argv)}: {done.stderr}"
        return done

    for group in PROFILES.values():
        msso("login", "--group", group, "--username", "alice", "--password-stdin", input="alice-pass\n")
    for group in PROFILES.values():
        msso("sign", "--group", group, "--url", URL)
        msso("sign", "--group", group, "--method", "POST", "--url", URL, "--header", "Content-Type: application/json")
    for verb in ("check", "status", "extend", "token"):
        msso(verb, "--group", GROUP)
        msso(verb, "--group", GROUP, "--json")
    device = broker.device_login(idp, group=PER_RESOURCE, binary=MSSO)
    assert device.returncode == 0, device.stderr
    msso("sign", "--group", PER_RESOURCE, "--url", URL)
    msso("status", "--group", PER_RESOURCE)
    msso("login", "--group", REFRESHING, "--username", "alice", "--password-stdin", input="alice-pass\n")
    time.sleep(1.1)
    msso("sign", "--group", REFRESHING, "--url", URL)
    broker.msso("doctor")  # some checks fail in a test session (no systemd units); it runs all the same
    subscriber = RawClient(broker.socket)
    assert subscriber.call("subscribe", {"groups": [GROUP]})["type"] == "reply"
    client = RawClient(broker.socket)
    for _ in range(200):
        for group in [*PROFILES.values(), PER_RESOURCE]:
            client.call("sign", {"group": group, "method": "GET", "url": URL})
        client.call("ping", {"data": "x"})
    frame = Path(tempfile.mkdtemp()) / "sign"
    payload = f'{{"type":"call","serial":2,"method":"sign","args":{{"group":"{GROUP}","method":"GET","url":"{URL}"}}}}'.encode()
    frame.write_bytes(len(payload).to_bytes(4, "big") + payload)
    subprocess.run([TOOLS / "load", "latency", broker.socket, "2000", frame], check=True, capture_output=True)
    msso("lock", "--group", GROUP, "--passphrase-stdin", input="order-pass\n")
    assert broker.msso("sign", "--group", GROUP, "--url", URL).returncode == 8
    msso("unlock", "--group", GROUP, "--passphrase-stdin", input="order-pass\n")
    os.kill(broker.process.pid, signal.SIGHUP)
    time.sleep(0.5)
    msso("logout", "--group", GROUP)
    subscriber.sock.settimeout(2)
    event = subscriber.receive()
    assert event.get("signal") == "LoggedOut", event
    msso("login", "--group", GROUP, "--username", "alice", "--password-stdin", input="alice-pass\n")
    msso("logout", "--all")
    subscriber.close()
    client.close()


def main():
    work = Path(tempfile.mkdtemp(prefix="msso-order-"))
    table = functions(DAEMON)
    (work / "functions").write_text("".join(f"{address:x}\n" for address in sorted(table)))
    desktop, idp = Desktop(), IdP(resources=[RESOURCE])
    groups = {name: {"sign": profile} for profile, name in PROFILES.items()}
    groups[PER_RESOURCE] = {"resources": [RESOURCE], "tokens": "per-resource"}
    groups[REFRESHING] = {"refresh_lead": "3600s"}
    # SWIFT_BACKTRACE set as mssod wants it: it would re-exec itself otherwise, out of the trace.
    # Started with an option, as the bench starts it, so that option parsing is traced too.
    broker = Broker(desktop, idp, groups=groups, args=["--idle-timeout", "3600"], start=False,
                    executable=DAEMON,
                    launcher=[TOOLS / "trace", work / "functions", work / "hits", "--"],
                    environment={"MSSO_LOG_LEVEL": "info", "SWIFT_BACKTRACE": "enable=no"}, admin_files=False)
    try:
        broker.register("order", [PYTHON, TOOLS / "load", MSSO], list(groups))
        broker.start()
        life(broker, idp)
    finally:
        broker.stop()
        idp.cleanup()
        desktop.cleanup()
    ran = sorted(int(line, 16) for line in (work / "hits").read_text().split())
    names = [name for address in ran for name in table[address][1]]
    size = sum(table[address][0] for address in ran)
    header = ("# mssod's link order (lld --symbol-ordering-file): the functions a broker's life runs, made by\n"
              "# `make order` (bench/order.py). Regenerate after large changes; a stale list costs memory only.\n")
    Path(options.out).write_text(header + "".join(f"{name}\n" for name in names))
    print(f"{len(ran)} of {len(table)} functions ran ({size / 1024:.0f} KiB of code); {len(names)} names written to {options.out}")


main()
