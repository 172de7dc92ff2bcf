#!/usr/bin/env python3
"""A small command-line tool on the msso Python library (clients/python, package `msso`).

    python3 msso_client.py status
    python3 msso_client.py check                # exit 0 valid, 1 expired, 2 not logged in
    python3 msso_client.py sign https://api.example.com/items
    python3 msso_client.py login alice          # password read from stdin or the terminal
    python3 msso_client.py watch                # print LoggedIn/LoggedOut/... as they happen

The library grew from the client this file used to be, written from docs/PROTOCOL.md alone; it
is found installed (`pip install clients/python`), else in this checkout.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

try:
    import msso
except ImportError:   # run from a checkout, without installing the library
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python" / "src"))
    import msso


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
        with msso.Client(options.socket, client="msso_client.py") as broker:
            if options.verb == "status":
                groups = broker.status(options.group)
                show({"groups": groups}, "\n".join(map(_describe, groups)))
            elif options.verb == "check":
                status = broker.check(options.group)
                show(status, _describe(status))
                return {"valid": 0, "expired": 1}.get(status.get("state"), 2)
            elif options.verb == "sign":
                if any(":" not in header for header in options.header):
                    parser.error("sign: a --header is 'NAME: VALUE'")
                headers = [tuple(part.strip() for part in h.split(":", 1)) for h in options.header]
                body = open(options.body_file, "rb").read() if options.body_file else None
                signed = broker.sign(options.method, options.url, headers, body, group=options.group)
                show({"headers": [list(h) for h in signed]}, "\n".join(f"{n}: {v}" for n, v in signed))
            elif options.verb == "login":
                if options.device:
                    status = broker.login_device(group=options.group)
                elif not options.username:
                    parser.error("login: give a USERNAME, or --device")
                else:
                    password = getpass.getpass(f"Password for {options.username}: ") if sys.stdin.isatty() else sys.stdin
                    status = broker.login(options.username, password, group=options.group)
                show(status, _describe(status))
            elif options.verb == "extend":
                status = broker.extend(options.group)
                show(status, _describe(status))
            elif options.verb == "logout":
                groups = broker.logout(options.group, all=options.all)["loggedOut"]
                show({"loggedOut": groups},
                     f"Logged out of {', '.join(groups)}." if groups else "No SSO session was active.")
            elif options.verb == "watch":
                events = broker.events([options.group] if options.group else None)
                print("Watching (Ctrl-C to stop).", file=sys.stderr, flush=True)
                for event in events:
                    if options.json:
                        print(json.dumps(event.raw), flush=True)
                    else:
                        print(f"{event.name}: {_describe(event.status or {'group': event.group})}", flush=True)
    except msso.MSSOError as error:
        print(f"msso_client.py: {error.name}: {error.message}", file=sys.stderr)
        return error.exit_status   # as the msso command would
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
