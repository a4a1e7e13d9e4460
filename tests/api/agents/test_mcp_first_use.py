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
import asyncio, json, sys, threading

import config.asgi as web

def imported():
    return any(name == "mcp" or name.startswith("mcp.") for name in sys.modules)

report = {"imported_at_start": imported()}
builds, answered_meanwhile = [], threading.Event()
build, failing = web.mcp_app.build, sys.argv[1] == "failing"


def gated_build():
    # Held until an API request made meanwhile is answered: on the event loop it would
    # hold that answer, and the build would wait out its 10 s alone.
    builds.append(answered_meanwhile.wait(10))
    if failing and len(builds) == 1:
        raise RuntimeError("a build that fails once")
    return build()


web.mcp_app.build = gated_build
web.mcp_app.RETRY_SECONDS = 0 if failing else web.mcp_app.RETRY_SECONDS


def scope(method, path, headers=()):
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
            "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"",
            "headers": [(b"host", b"127.0.0.1"), *headers], "client": ("127.0.0.1", 40000),
            "server": ("127.0.0.1", 8000), "state": {}}


async def answered(request_scope):
    status = await call(web.application, request_scope)
    answered_meanwhile.set()
    return status


async def call(app, request_scope, body=b"", whole=None):
    sent, arriving = [], asyncio.Queue()
    arriving.put_nowait({"type": "http.request", "body": body, "more_body": False})

    async def receive():  # the body, then nothing more (the client stays until answered)
        return await arriving.get()

    async def send(message):
        sent.append(message)

    await app(request_scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    if whole is not None:
        whole.append((start["status"], dict(start["headers"]).get(b"retry-after", b"").decode(),
                      b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body").decode()))
    return start["status"]


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
    mcp = scope("POST", "/mcp", headers)
    if failing:
        refused = []
        await asyncio.gather(call(web.application, mcp, tools, refused), answered(scope("GET", "/healthz")))
        report["refused"] = refused
        report["mcp_statuses"] = [await call(web.application, mcp, tools)]
    else:
        *report["mcp_statuses"], report["api_status_while_building"] = await asyncio.gather(
            *(call(web.application, mcp, tools) for _ in range(3)), answered(scope("GET", "/healthz")))
    report["builds"] = builds
    report["imported_after_mcp"] = imported()
    report["session_manager_running"] = web.mcp_app.lifespan is not None and not web.mcp_app.lifespan.done()
    await inbox.put({"type": "lifespan.shutdown"})
    report["shutdown"] = (await events.get())["type"]
    await asyncio.wait_for(life, 10)
    report["session_manager_ended"] = web.mcp_app.lifespan.done() and web.mcp_app.lifespan.exception() is None

asyncio.run(main())
print(json.dumps(report))
"""


def run_script(mode: str) -> dict:
    env = {**os.environ, "DJANGO_DEBUG": "true", "PYTHONUNBUFFERED": "1"}
    env.pop("DATABASE_URL", None)  # no request here reads the database
    result = subprocess.run([sys.executable, "-c", SCRIPT, mode], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


def test_the_mcp_server_is_built_once_off_the_loop_at_its_first_request_and_ends_with_the_process():
    report, _ = run_script("building")
    assert report["imported_at_start"] is False
    assert report["startup"] == "lifespan.startup.complete"
    assert report["api_status"] == 200 and report["imported_after_an_api_request"] is False
    # No credentials: the MCP server's own gate answers each of the three, after one build,
    # which went on while the event loop answered an API request.
    assert report["mcp_statuses"] == [401, 401, 401] and report["builds"] == [True]
    assert report["api_status_while_building"] == 200
    assert report["imported_after_mcp"] is True and report["session_manager_running"] is True
    assert report["shutdown"] == "lifespan.shutdown.complete" and report["session_manager_ended"] is True


def test_a_build_that_fails_answers_503_in_the_apis_shape_and_is_tried_again():
    report, log = run_script("failing")
    [(status, retry_after, body)] = report["refused"]
    assert status == 503 and retry_after.isdigit()
    assert json.loads(body)["code"] == "backend_unavailable"
    assert "the MCP server could not be built" in log and "a build that fails once" in log
    assert report["mcp_statuses"] == [401] and len(report["builds"]) == 2
    assert report["session_manager_ended"] is True


def test_migrate_and_check_say_when_the_mcp_server_cannot_be_built(monkeypatch):
    from api.agents import checks, server

    assert checks.mcp_server_builds(None) == []
    monkeypatch.setattr(server, "http_app", lambda: (_ for _ in ()).throw(ImportError("no module named mcp")))
    [error] = checks.mcp_server_builds(None)
    assert error.id == "relay.E001" and "no module named mcp" in error.msg
