"""The web process's CPU per call, for the routes and tools an agent's wait costs: one
gunicorn worker (uvicorn), calls made one after another by one client, the worker's CPU
time divided by the calls. A message is already there, so no call waits.

    scripts/bench.sh mcp_cost [--calls 300]
"""
import argparse
import asyncio
import smtplib
import sys
import time

import httpx2
import requests

from bench.api import PORT, _answers
from bench.common import command_line, cpu_seconds, fresh_database, record, setup_django, spawn, stop, wait_until

SMTP_PORT = 2598
WARM_UP = 20


def per_call(web, calls: int, call) -> float:
    """Milliseconds of the web worker's CPU per call of `call()`."""
    for _ in range(WARM_UP):
        call()
    before = cpu_seconds(web.pid)
    for _ in range(calls):
        call()
    return (cpu_seconds(web.pid) - before) / calls * 1000


async def per_tool_call(web, calls: int, key: str, tool: str, arguments: dict) -> float:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http, \
            streamable_http_client(f"http://127.0.0.1:{PORT}/mcp", http_client=http) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        for _ in range(WARM_UP):
            await session.call_tool(tool, arguments)
        before = cpu_seconds(web.pid)
        for _ in range(calls):
            result = await session.call_tool(tool, arguments)
            assert not result.is_error, result
        return (cpu_seconds(web.pid) - before) / calls * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    fresh_database()
    setup_django()
    from accounts.services import account_create_with_key
    from mailboxes.lifecycle import mailbox_create
    from accounts.identity import Caller
    from relay.backends import get_backend

    owner, key = account_create_with_key(login="bench", plan="enterprise")
    box = mailbox_create(backend=get_backend(), caller=Caller(owner=owner), local_part=None, domain=None,
                         ttl_ms=3_600_000)[0]
    env = {"RELAY_LOG_LEVEL": "WARNING"}
    web = spawn("web-cost", [sys.executable, "-m", "gunicorn", "config.asgi", "-k", "core.serving.UvicornWorker",
                             "-w", "1", "-b", f"127.0.0.1:{PORT}"], env=env)
    smtp = spawn("smtp-cost", [sys.executable, "manage.py", "runsmtp", "--port", str(SMTP_PORT)], env=env,
                 ready="Relay SMTP on")
    try:
        wait_until(lambda: _answers(f"http://127.0.0.1:{PORT}/api/schema/"), 60, "the ASGI server")
        with smtplib.SMTP("127.0.0.1", SMTP_PORT, timeout=30) as client:
            client.sendmail("bench@example.com", [box.address], b"Subject: Code\r\n\r\nYour code is 482913.\r\n")
        http = requests.Session()
        http.headers["Authorization"] = f"Bearer {key}"
        messages = f"http://127.0.0.1:{PORT}/api/v1/mailboxes/{box.id}/messages"
        wait_until(lambda: http.get(messages).json()["count"] == 1, 30, "the message")
        message_id = http.get(messages).json()["results"][0]["id"]
        started = time.monotonic()
        costs = {
            "GET whoami": per_call(web, args.calls, lambda: http.get(f"http://127.0.0.1:{PORT}/api/v1/whoami")),
            "GET messages?wait=1": per_call(web, args.calls, lambda: http.get(messages + "?wait=1")),
            "GET message": per_call(web, args.calls, lambda: http.get(f"{messages}/{message_id}")),
            "MCP wait_for_code": asyncio.run(per_tool_call(web, args.calls, key, "wait_for_code",
                                                           {"mailbox_id": str(box.id), "timeout_seconds": 1})),
            "MCP get_mailbox": asyncio.run(per_tool_call(web, args.calls, key, "get_mailbox",
                                                         {"mailbox_id": str(box.id)})),
        }
        print(f"{len(costs) * (args.calls + WARM_UP)} calls in {time.monotonic() - started:.0f} s")
    finally:
        stop(web, smtp)
    figures = "web CPU per call, one uvicorn worker: " + "; ".join(
        f"{name} **{cost:.1f} ms**" for name, cost in costs.items())
    record("mcp_cost", command_line(), figures)


if __name__ == "__main__":
    main()
