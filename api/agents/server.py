"""The MCP server (docs/agents.md): the tools of api/agents/tools.py on the official SDK,
over streamable HTTP at `/mcp` (the web process, config/asgi.py) and over stdio
(`manage.py runmcp`).

Over HTTP it is stateless: every POST carries its own credentials and is answered on
its own, so any web process answers any request and a restart loses nothing. Each
answer is a short event stream rather than one JSON body: the stream notices a client
that hangs up, and the call (a held wait with its open-wait place) ends with it. A request
without valid credentials is refused with 401 before the SDK sees it; each tool call is
then authenticated again by the API route it calls, so a key revoked between two calls
is refused on the next one."""
import asyncio
import logging

from django.conf import settings
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings

from api.agents.dispatch import CLIENT_GONE
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
        streamable_http_path="/mcp", stateless_http=True, json_response=False, transport_security=security))


UNAUTHORIZED = (b'{"code":"unauthorized","message":"Use the header \'Authorization: Bearer <key>\' with an API key '
                b'or a mailbox token."}')


def _refusal(authorization: str) -> tuple[int, bytes] | None:
    """Why the API would refuse these credentials (status and body), or None."""
    scheme, _, secret = authorization.partition(" ")
    try:
        if scheme.lower() == "bearer" and secret.strip() and caller_for_secret(secret.strip()) is not None:
            return None
    except RelayError as exc:  # a suspended account: 403, as the API answers it
        response = json_error_response(exc)
        return response.status_code, response.content
    return 401, UNAUTHORIZED


def _noticing_hang_up(receive, gone: asyncio.Event):
    """`receive`, setting `gone` when the client disconnects (the SDK's event stream
    listens for it), so that the tools' calls in flight end with the request."""
    async def watched():
        message = await receive()
        if message["type"] == "http.disconnect" and not gone.is_set():
            logger.debug("an MCP request's connection closed; calls still in flight end")
            gone.set()
        return message
    return watched


class CredentialsGate:
    """The API's refusal (401 without a valid key or mailbox token, 403 for a suspended
    account) for an HTTP request to `/mcp`; everything else (the lifespan, requests with
    valid credentials) goes to the SDK."""

    def __init__(self, app) -> None:
        self.app = app
        self.refusal = in_pool(_refusal)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            gone = asyncio.Event()
            CLIENT_GONE.set(gone)
            receive = _noticing_hang_up(receive, gone)
            authorization = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
            refused = await self.refusal(authorization)
            if refused is not None:
                status, body = refused
                await send({"type": "http.response.start", "status": status, "headers": [
                    (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b'Bearer realm="relay"')]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)
