"""The web process builds its MCP server at the first request to `/mcp` (config/asgi.py):
a process started and serving the API has not imported the SDK; requests that arrive
together while it is built wait for one build and are all answered; the process's end
ends the server's lifespan. In a fresh Python process, driving the ASGI application as
uvicorn does."""
import json
import os
import subprocess
import sys

from tests.helpers import ROOT

SCRIPT = r"""
import asyncio, json, sys

import config.asgi as web

def imported():
    return any(name == "mcp" or name.startswith("mcp.") for name in sys.modules)

report = {"imported_at_start": imported()}
builds = []
build = web.mcp_app.build
web.mcp_app.build = lambda: builds.append(1) or build()


def scope(method, path, headers=()):
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
            "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"",
            "headers": [(b"host", b"127.0.0.1"), *headers], "client": ("127.0.0.1", 40000),
            "server": ("127.0.0.1", 8000), "state": {}}


async def call(app, request_scope, body=b""):
    sent, arriving = [], asyncio.Queue()
    arriving.put_nowait({"type": "http.request", "body": body, "more_body": False})

    async def receive():  # the body, then nothing more (the client stays until answered)
        return await arriving.get()

    async def send(message):
        sent.append(message)

    await app(request_scope, receive, send)
    return next(m["status"] for m in sent if m["type"] == "http.response.start")


async def main():
    inbox, events = asyncio.Queue(), asyncio.Queue()
    life = asyncio.ensure_future(web.application({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}},
                                                 inbox.get, events.put))
    await inbox.put({"type": "lifespan.startup"})
    report["startup"] = (await events.get())["type"]
    report["api_status"] = await call(web.application, scope("GET", "/healthz"))
    report["imported_after_an_api_request"] = imported()
    tools = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
    headers = [(b"content-type", b"application/json"), (b"accept", b"application/json, text/event-stream")]
    report["mcp_statuses"] = await asyncio.gather(*(call(web.application, scope("POST", "/mcp", headers), tools)
                                                    for _ in range(3)))
    report["builds"] = len(builds)
    report["imported_after_mcp"] = imported()
    report["session_manager_running"] = web.mcp_app.lifespan is not None and not web.mcp_app.lifespan.done()
    await inbox.put({"type": "lifespan.shutdown"})
    report["shutdown"] = (await events.get())["type"]
    await asyncio.wait_for(life, 10)
    report["session_manager_ended"] = web.mcp_app.lifespan.done() and web.mcp_app.lifespan.exception() is None

asyncio.run(main())
print(json.dumps(report))
"""


def test_the_mcp_server_is_built_once_at_its_first_request_and_ends_with_the_process():
    env = {**os.environ, "DJANGO_DEBUG": "true", "PYTHONUNBUFFERED": "1"}
    env.pop("DATABASE_URL", None)  # no request here reads the database
    result = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["imported_at_start"] is False
    assert report["startup"] == "lifespan.startup.complete"
    assert report["api_status"] == 200 and report["imported_after_an_api_request"] is False
    # No credentials: the MCP server's own gate answers each of the three, after one build.
    assert report["mcp_statuses"] == [401, 401, 401] and report["builds"] == 1
    assert report["imported_after_mcp"] is True and report["session_manager_running"] is True
    assert report["shutdown"] == "lifespan.shutdown.complete" and report["session_manager_ended"] is True
