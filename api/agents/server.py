"""The MCP server (docs/agents.md): the tools of api/agents/tools.py on the official SDK,
over streamable HTTP at `/mcp` (the web process, config/asgi.py) and over stdio
(`manage.py runmcp`).

Over HTTP it is stateless: every POST carries its own credentials and is answered on
its own, so any web process answers any request and a restart loses nothing. Each
answer is one JSON body (the SDK's JSON-response mode, cheaper than a one-event stream
for both ends); while a call is in flight the gate below listens to the connection, so
a client that hangs up ends its call (a held wait with its open-wait place). A request
without valid credentials is refused with 401 before the SDK sees it; each tool call is
then authenticated again by the API route it calls, so a key revoked between two calls
is refused on the next one."""
import asyncio
import logging

from django.conf import settings
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings

from api.agents.dispatch import AUTHENTICATED, CLIENT_GONE
from api.authentication import Principal
from api.agents.tools import TOOLS
from api.errors import json_error_response
from api.pooling import in_pool
from mailboxes.errors import RelayError
from mailboxes.keys import caller_for_secret

logger = logging.getLogger(__name__)

INSTRUCTIONS = (
    "Relay gives you disposable email mailboxes. Create one with create_mailbox, give its address to the "
    "service that should mail you, then call wait_for_code (a verification code) or wait_for_message (any "
    "mail): they return as soon as the mail arrives. Delete the mailbox when done; it also expires by itself."
)


def build() -> MCPServer:
    server = MCPServer(name="relay", instructions=INSTRUCTIONS, log_level="WARNING")
    for tool in TOOLS:
        server.add_tool(tool)
    # The SDK wraps every message in an OpenTelemetry span, which records nothing until an
    # exporter is installed, and Relay installs none; the span still costs each answer its
    # share of a held wait's wake-up (docs/benchmarks.md, "MCP waits").
    # The SDK says to drop it from the list to opt out; it exports no name for it.
    server.middleware[:] = [layer for layer in server.middleware
                            if type(layer).__name__ != "OpenTelemetryMiddleware"]
    return server


def _allowed_hosts() -> list[str]:
    """Django's ALLOWED_HOSTS, as the SDK's DNS-rebinding check writes them (any port)."""
    hosts = []
    for host in settings.ALLOWED_HOSTS:
        if host == "*":
            return []
        host = "*" + host if host.startswith(".") else host
        hosts += [host, f"{host}:*"]
    return hosts


def http_app():
    """The ASGI app that answers `/mcp`, behind the credentials check."""
    hosts = _allowed_hosts()
    security = TransportSecuritySettings(enable_dns_rebinding_protection=bool(hosts), allowed_hosts=hosts,
                                         allowed_origins=[f"http://{h}" for h in hosts] + [f"https://{h}" for h in hosts])
    return CredentialsGate(build().streamable_http_app(
        streamable_http_path="/mcp", stateless_http=True, json_response=True, transport_security=security))


UNAUTHORIZED = (b'{"code":"unauthorized","message":"Use the header \'Authorization: Bearer <key>\' with an API key '
                b'or a mailbox token."}')


def _authenticate(authorization: str) -> Principal | tuple[int, bytes]:
    """Who these credentials are, as the API sees them, or why the API would refuse them
    (status and body)."""
    scheme, _, secret = authorization.partition(" ")
    try:
        caller = caller_for_secret(secret.strip()) if scheme.lower() == "bearer" and secret.strip() else None
    except RelayError as exc:  # a suspended account: 403, as the API answers it
        response = json_error_response(exc)
        return response.status_code, response.content
    if caller is None:
        return 401, UNAUTHORIZED
    return Principal(owner=caller.owner, mailbox_id=caller.mailbox_id, api_key_id=caller.api_key_id)


async def _watch_for_hang_up(receive, gone: asyncio.Event) -> None:
    """Set `gone` when the client disconnects: the request's body has been read, so the
    next message the server has for this request is its disconnect (or, once the answer
    is sent, the end of the request, when nothing is in flight any more)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    if not gone.is_set():
        logger.debug("an MCP request's connection closed; calls still in flight end")
        gone.set()


class CredentialsGate:
    """The API's refusal (401 without a valid key or mailbox token, 403 for a suspended
    account) for an HTTP request to `/mcp`; everything else (the lifespan, requests with
    valid credentials) goes to the SDK."""

    def __init__(self, app) -> None:
        self.app = app
        self.authenticate = in_pool(_authenticate)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            authorization = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
            caller = await self.authenticate(authorization)
            if not isinstance(caller, Principal):
                status, body = caller
                await send({"type": "http.response.start", "status": status, "headers": [
                    (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b'Bearer realm="relay"')]})
                await send({"type": "http.response.body", "body": body})
                return
            # The tools that hold a wait start from this; every other call is
            # authenticated again by its route.
            AUTHENTICATED.set(caller)
            await self.answer(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def answer(self, scope, receive, send) -> None:
        """Let the SDK answer, and watch for the client going away meanwhile: once the
        SDK has read the request's body, nothing else listens to the connection (each
        answer is one JSON body), and a tool's call in flight (a held wait and its
        open-wait place) must end with its client (CLIENT_GONE)."""
        gone = asyncio.Event()
        CLIENT_GONE.set(gone)
        watcher: asyncio.Task | None = None

        async def body_then_watch():
            nonlocal watcher
            message = await receive()
            if message["type"] == "http.disconnect":
                gone.set()
            elif not message.get("more_body") and watcher is None:
                watcher = asyncio.ensure_future(_watch_for_hang_up(receive, gone))
            return message

        try:
            await self.app(scope, body_then_watch, send)
        finally:
            if watcher is not None:
                watcher.cancel()
