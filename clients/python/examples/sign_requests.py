#!/usr/bin/env python3
"""GETs a URL with `requests`, each request signed by the msso broker, and prints the JSON answer.

    python3 sign_requests.py https://api.example.com/items [--group com.example.suite]

Exits as the `msso` command would when the broker refuses (2: not logged in, 1: expired, ...).
"""
import argparse
import json
import sys

import requests

import msso
import msso.requests


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("url")
    parser.add_argument("--group", help="the access group (default: the only one this program may use)")
    options = parser.parse_args()

    session = requests.Session()
    session.auth = msso.requests.Auth(group=options.group)   # bearer, DPoP or RFC 9421: the group decides
    try:
        answer = session.get(options.url, timeout=30)
    except msso.MSSOError as error:
        print(f"sign_requests.py: {error.message}", file=sys.stderr)
        return error.exit_status
    answer.raise_for_status()
    print(json.dumps(answer.json()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
