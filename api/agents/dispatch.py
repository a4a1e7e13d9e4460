"""Calling an API route inside this process, as a request from the caller would.

The request goes through Django's own ASGI handler, its middleware and the route's view,
with the caller's `Authorization` header, host and address: authentication (revocation
included), throttles, quotas and validation are the API's, not a copy of them. No
socket, no second HTTP hop: a held `wait` is the API's held wait, woken by the same
Redis subscription. When the MCP client goes away mid-call (CLIENT_GONE), the route is
told that its client disconnected, as Django is told by a server: Django cancels the
view, whose cleanup (the open-wait place, the subscription) runs as it would for an HTTP
client that hung up."""
import asyncio
import contextlib
import io
import json
from contextvars import ContextVar
from dataclasses import dataclass
from urllib.parse import urlencode

from django.core.handlers.asgi import ASGIHandler, ASGIRequest

from api.authentication import Principal

API_PREFIX = "/api/v1"
_handler: ASGIHandler | None = None
# Set when the MCP client whose request this call serves has hung up (api.agents.server
# sets it; the tools run in tasks that inherit the request's context): a held call ends.
CLIENT_GONE: ContextVar[asyncio.Event | None] = ContextVar("relay_mcp_client_gone", default=None)
# Who the HTTP request's credentials were found to be by the gate (api.agents.server), a
# moment before its tool runs; None over stdio.
AUTHENTICATED: ContextVar[Principal | None] = ContextVar("relay_mcp_authenticated", default=None)


class ClientGone(Exception):
    """The caller went away before the route answered; the route's call was cancelled."""


def _django() -> ASGIHandler:
    global _handler
    if _handler is None:
        _handler = ASGIHandler()
    return _handler


@dataclass(frozen=True)
class Caller:
    """Who calls, as the API sees a request: its credentials, the host it asked for, its
    address (throttles group callers by it)."""

    authorization: str
    host: str = "localhost"
    address: str = "127.0.0.1"
    # What a reverse proxy said of the request (X-Forwarded-For, X-Forwarded-Proto): passed
    # on, for the API's own rule (RELAY_TRUSTED_PROXIES) to trust or ignore.
    forwarded: tuple[tuple[str, str], ...] = ()


@dataclass
class Answer:
    status: int
    body: bytes
    headers: dict[str, str]

    def json(self):
        return json.loads(self.body) if self.body else None


def _query_string(query: dict | None) -> bytes:
    pairs = []
    for name, value in (query or {}).items():
        if value is None:
            continue
        for item in value if isinstance(value, (list, tuple)) else [value]:
            pairs.append((name, str(item).lower() if isinstance(item, bool) else str(item)))
    return urlencode(pairs).encode()


def _scope(caller: Caller, method: str, path: str, query: dict | None, headers: list) -> dict:
    headers = [(b"host", caller.host.encode()), (b"authorization", caller.authorization.encode()),
               (b"accept", b"application/json"), *headers]
    headers += [(name.encode(), value.encode("latin-1")) for name, value in caller.forwarded]
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
        "path": API_PREFIX + path, "raw_path": (API_PREFIX + path).encode(), "root_path": "",
        "query_string": _query_string(query), "headers": headers,
        "client": (caller.address, 0), "server": (caller.host.split(":")[0], 80),
    }


def request_for(caller: Caller, path: str, *, query: dict | None = None) -> ASGIRequest:
    """A GET of `API_PREFIX + path` by `caller`, as Django would hand it to a view, for
    the async code that a route and a tool share (api.waiting.first_message): it
    authenticates the request itself, as the route does."""
    return ASGIRequest(_scope(caller, "GET", path, query, []), io.BytesIO())


async def until_client_gone(awaitable):
    """`awaitable`'s result, unless the MCP client hangs up first: then it is cancelled
    (its cleanup runs: the open-wait place, the subscription) and ClientGone raised."""
    gone = CLIENT_GONE.get()
    if gone is None:
        return await awaitable
    work, hang_up = asyncio.ensure_future(awaitable), asyncio.ensure_future(gone.wait())
    try:
        await asyncio.wait({work, hang_up}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        hang_up.cancel()
        if not work.done():
            work.cancel()
    if not work.cancelled() and work.done():
        return work.result()
    with contextlib.suppress(asyncio.CancelledError):
        await work  # its cleanup runs before the call ends
    raise ClientGone()


async def call(caller: Caller, method: str, path: str, *, query: dict | None = None,
               body: dict | None = None) -> Answer:
    """`method` `API_PREFIX + path` for `caller`; the route's answer."""
    payload = json.dumps(body).encode() if body is not None else b""
    headers = []
    if body is not None:
        headers += [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    scope = _scope(caller, method, path, query, headers)
    sent_body = False
    # Django listens for the client's disconnect and then cancels the view (whose cleanup
    # runs: its open-wait place, its subscription). The client here is the MCP client.
    gone = CLIENT_GONE.get() or asyncio.Event()

    async def receive():
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": payload, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    answer = Answer(status=500, body=b"", headers={})
    chunks: list[bytes] = []

    async def send(message):
        if message["type"] == "http.response.start":
            answer.status = message["status"]
            answer.headers = {name.decode().lower(): value.decode("latin-1") for name, value in message["headers"]}
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await _django()(scope, receive, send)
    if gone.is_set() and not chunks:
        raise ClientGone()
    answer.body = b"".join(chunks)
    return answer
