"""MCP waits (docs/agents.md) against the API's own wait, in the same run, on gunicorn with
uvicorn workers, runsmtp, Redis and PostgreSQL.

`--waiters` MCP clients (the official SDK's ClientSession over streamable HTTP) each call
`wait_for_code` on a mailbox of their own; once every wait is held, one mail is sent to
each mailbox over SMTP. The figure is the time from each mail's `250` to its tool
result. Then the same number of plain `GET …/messages?wait=60` requests, answered the
same way. Also the web processes' memory while the waits are held, per waiter.

    scripts/bench.sh mcp_wait [--waiters 200]
"""
import argparse
import asyncio
import smtplib
import sys
import threading
import time

import httpx2

from bench.api import PORT, _answers
from bench.common import command_line, fresh_database, record, rss_mb, setup_django, spawn, stop, wait_until
from bench.waiting import percentile

SMTP_PORT = 2598


def open_waits(store) -> int:
    return sum(store.zcard(name) for name in store.scan_iter("relay:open-waits:*"))


def send_one_each(addresses: list[str]) -> dict[str, float]:
    """One mail with a code to each address; the time.monotonic() of each 250."""
    accepted = {}
    with smtplib.SMTP("127.0.0.1", SMTP_PORT, timeout=30) as smtp:
        for i, address in enumerate(addresses):
            smtp.sendmail("bench@example.com", [address],
                          f"Subject: Your code\r\n\r\nYour verification code is {200000 + i}.\r\n".encode())
            accepted[address] = time.monotonic()
    return accepted


async def mcp_round(key: str, mailboxes: list, store, web) -> tuple[list[float], float]:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    url = f"http://127.0.0.1:{PORT}/mcp"
    done: dict[str, float] = {}
    held = asyncio.Event()
    before = rss_mb(web.pid)

    async def agent(mailbox) -> None:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=120) as http, \
                streamable_http_client(url, http_client=http) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            result = await session.call_tool("wait_for_code", {"mailbox_id": str(mailbox.id), "timeout_seconds": 60})
            assert not result.is_error and result.structured_content["code"], result
            done[mailbox.address] = time.monotonic()
            await held.wait()  # keep the session open until every result is in

    tasks = [asyncio.create_task(agent(mailbox)) for mailbox in mailboxes]
    await asyncio.to_thread(wait_until, lambda: open_waits(store) >= len(mailboxes), 120, "every MCP wait held")
    during = rss_mb(web.pid)
    accepted = await asyncio.to_thread(send_one_each, [mailbox.address for mailbox in mailboxes])
    await asyncio.to_thread(wait_until, lambda: len(done) == len(mailboxes), 60, "every tool result")
    held.set()
    await asyncio.gather(*tasks)
    return [done[address] - accepted[address] for address in accepted], (during - before) / len(mailboxes)


def api_round(key: str, mailboxes: list, store, web) -> tuple[list[float], float]:
    import requests

    done: dict[str, float] = {}
    before = rss_mb(web.pid)

    def client(mailbox) -> None:
        response = requests.get(f"http://127.0.0.1:{PORT}/api/v1/mailboxes/{mailbox.id}/messages?wait=60",
                                headers={"Authorization": f"Bearer {key}"}, timeout=120)
        assert response.status_code == 200 and response.json()["results"], response.text
        done[mailbox.address] = time.monotonic()

    threads = [threading.Thread(target=client, args=(mailbox,)) for mailbox in mailboxes]
    for thread in threads:
        thread.start()
    wait_until(lambda: open_waits(store) >= len(mailboxes), 120, "every API wait held")
    during = rss_mb(web.pid)
    accepted = send_one_each([mailbox.address for mailbox in mailboxes])
    for thread in threads:
        thread.join(90)
    return [done[address] - accepted[address] for address in accepted], (during - before) / len(mailboxes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--waiters", type=int, default=200)
    args = parser.parse_args()
    fresh_database()
    setup_django()
    import redis
    from django.conf import settings

    from accounts.services import account_create_with_key
    from mailboxes.creation import mailbox_create
    from mailboxes.keys import Caller
    from relay.backends import get_backend

    owner, key = account_create_with_key(login="bench", plan="enterprise")

    def mailboxes() -> list:
        return [mailbox_create(backend=get_backend(), caller=Caller(owner=owner), local_part=None, domain=None,
                               ttl_ms=3_600_000)[0] for _ in range(args.waiters)]

    mcp_boxes, api_boxes = mailboxes(), mailboxes()
    store = redis.Redis.from_url(settings.RELAY_EVENTS_REDIS_URL)
    env = {"RELAY_LOG_LEVEL": "WARNING", "RELAY_MAX_OPEN_WAITS": "10000"}
    web = spawn("web-mcp", [sys.executable, "-m", "gunicorn", "config.asgi", "-k", "uvicorn_worker.UvicornWorker",
                            "-w", "2", "-b", f"127.0.0.1:{PORT}", "--timeout", "120"], env=env)
    smtp = spawn("smtp-mcp", [sys.executable, "manage.py", "runsmtp", "--port", str(SMTP_PORT)], env=env,
                 ready="Relay SMTP on")
    wait_until(lambda: _answers(f"http://127.0.0.1:{PORT}/api/schema/"), 60, "the ASGI server")
    try:
        mcp, mcp_memory = asyncio.run(mcp_round(key, mcp_boxes, store, web))
        api, api_memory = api_round(key, api_boxes, store, web)
    finally:
        stop(web, smtp)
    ms = lambda values, p: percentile(values, p) * 1000  # noqa: E731
    figures = (f"{args.waiters} concurrent waits, each answered by one mail, from the SMTP 250 to the answer: "
               f"MCP wait_for_code p50 **{ms(mcp, 0.5):.0f} ms**, p99 **{ms(mcp, 0.99):.0f} ms**; API wait p50 "
               f"{ms(api, 0.5):.0f} ms, p99 {ms(api, 0.99):.0f} ms; p99 ratio **{ms(mcp, 0.99) / ms(api, 0.99):.2f}**; "
               f"web RSS per held wait: MCP {mcp_memory * 1024:.0f} KiB, API {api_memory * 1024:.0f} KiB")
    record("mcp_wait", command_line(), figures)


if __name__ == "__main__":
    main()
