#!/usr/bin/env python3
"""asyncio: shows the session, then GETs a URL with httpx, signed by the msso broker.

    python3 httpx_async.py https://api.example.com/items [--group com.example.suite] [--watch]

With --watch it then prints the group's signals (LoggedOut, Expired, ...) until interrupted.
"""
import argparse
import asyncio
import sys
import time

import httpx

import msso
import msso.aio
import msso.httpx


async def main(url: str, group: str | None, watch: bool) -> int:
    async with msso.aio.Client() as broker:
        status = await broker.check(group)
        if status["state"] != "valid":
            print(f"{status['group']}: {status['state']}; run `msso login --group {status['group']}`", file=sys.stderr)
            return 2
        left = status["sessionExpiresAt"] - time.time()
        print(f"{status['group']}: logged in as {status.get('username')}, {left / 60:.0f} min left")

        async with httpx.AsyncClient(auth=msso.httpx.Auth(aio_client=broker, group=group)) as http:
            answer = await http.get(url)
        print(answer.status_code, answer.text)

        if watch:
            async for event in await broker.events([status["group"]]):
                print(event.name, event.group, event.status and event.status["state"], flush=True)
    return 0 if answer.is_success else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("url")
    parser.add_argument("--group")
    parser.add_argument("--watch", action="store_true")
    options = parser.parse_args()
    try:
        sys.exit(asyncio.run(main(options.url, options.group, options.watch)))
    except msso.MSSOError as error:
        print(f"httpx_async.py: {error.message}", file=sys.stderr)
        sys.exit(error.exit_status)
    except KeyboardInterrupt:
        sys.exit(130)
