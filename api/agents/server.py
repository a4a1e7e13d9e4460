"""The MCP server (docs/agents.md): the tools on the official SDK, over stateless streamable
HTTP at `/mcp` (one JSON body an answer, POST only) and over stdio (`manage.py runmcp`)."""
import asyncio
import json
import logging
from urllib.parse import urlsplit

from django.conf import settings
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import CallToolResult
from pydantic import ValidationError
from rest_framework import exceptions

from api.agents.declare import CLIENT_GONE, CREDENTIALS, Credentials, failure
from api.agents.check_tools import CHECK_TOOLS
from api.agents.conversation_tools import CONVERSATION_TOOLS
from api.agents.domain_tools import DOMAIN_TOOLS
from api.agents.tools import TOOLS
from api.authentication import ALL, TOOLS as TOOL_SCOPES, InsufficientScope, bearer_secret, challenge, insufficient_scope
from api.errors import error_body, json_error_response
from core.pools import in_pool
from mailboxes.errors import RelayError

logger = logging.getLogger(__name__)

INSTRUCTIONS = (
    "Relay gives you disposable email mailboxes. Create one with create_mailbox, give its address to the "
    "service that should mail you, then call wait_for_code (a verification code) or wait_for_message (any "
    "mail): they return as soon as the mail arrives; pass authenticated=true to take only mail whose sender "
    "is proven (SPF, DKIM, DMARC), never a forged one. To answer a mail, reply_to_message keeps the conversation "
    "in one thread (list_threads, get_thread). Delete the mailbox when done; it also expires by itself."
)


def _invalid_arguments(tool, arguments: dict) -> str | None:
    """Why `arguments` do not fit `tool` (an unknown argument, a wrong type or range, judged
    as JSON Schema would, strictly), or None."""
    known = tool.parameters.get("properties", {})
    unknown = sorted(set(arguments) - set(known))
    if unknown:
        return (f"{', '.join(unknown)}: not an argument of {tool.name}; it takes "
                f"{', '.join(known) or 'no arguments'}.")
    try:
        tool.fn_metadata.arg_model.model_validate_json(json.dumps(arguments), strict=True)
    except ValidationError as exc:
        return " ".join(f"{'.'.join(str(part) for part in error['loc']) or 'arguments'}: {error['msg']}."
                        for error in exc.errors(include_url=False))
    return None


class RelayServer(MCPServer):
    async def call_tool(self, name, arguments, context=None) -> CallToolResult:
        tool = self._tool_manager.get_tool(name)
        if tool is not None:
            problem = _invalid_arguments(tool, arguments or {})
            if problem:
                logger.info("refused a call of %s: %s", name, problem)
                return failure("invalid_request", problem)
        return await super().call_tool(name, arguments, context)


def build() -> MCPServer:
    server = RelayServer(name="Relay", version=settings.RELAY_VERSION, instructions=INSTRUCTIONS,
                         log_level="WARNING")
    for tool in TOOLS + CONVERSATION_TOOLS + DOMAIN_TOOLS + CHECK_TOOLS:
        server.add_tool(tool, annotations=tool.annotations)
        # The schema says what call_tool enforces: no argument but these.
        server._tool_manager.get_tool(tool.__name__).parameters["additionalProperties"] = False
    # The SDK's OpenTelemetry span records nothing without an exporter yet costs each wake-up;
    # the SDK says to drop it from the list to opt out.
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
REFUSED = b'{"code":"unauthorized","message":"Invalid or revoked API key."}'
NOT_ALLOWED = (b'{"code":"method_not_allowed","message":"Relay\'s MCP endpoint answers POST only: each answer is one '
               b'JSON body, and no server-to-client stream is offered."}')


def mcp_challenge(*, credentials_sent: bool) -> str:
    """The API's challenge, with where a hosted agent finds how to sign in (RFC 9728) and
    the scopes to ask for."""
    metadata = settings.RELAY_PUBLIC_URL + "/.well-known/oauth-protected-resource/mcp"
    return f'{challenge(credentials_sent=credentials_sent)}, resource_metadata="{metadata}", scope="{" ".join(ALL)}"'


async def _whole_body(receive) -> tuple[bytes, list[dict]]:
    """The request's body, and the messages it came in (to hand on to the SDK as they were)."""
    messages, body = [], b""
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return body, messages
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body, messages


def _tool_of(body: bytes) -> str | None:
    """The tool a JSON-RPC `tools/call` names, or None for any other message."""
    try:
        message = json.loads(body)
    except ValueError:
        return None
    if isinstance(message, dict) and message.get("method") == "tools/call" and isinstance(message.get("params"), dict):
        name = message["params"].get("name")
        return name if isinstance(name, str) else None
    return None


def _credentials_for(authorization: str, base_url: str) -> Credentials | tuple[int, bytes, list]:
    """Who these credentials are, as the API sees them, or why the API would refuse them
    (status, body and headers)."""
    if not authorization:
        return 401, UNAUTHORIZED, [(b"www-authenticate", mcp_challenge(credentials_sent=False).encode())]
    refused = 401, REFUSED, [(b"www-authenticate", mcp_challenge(credentials_sent=True).encode())]
    secret = bearer_secret(authorization)
    if secret is None:
        return refused
    try:
        principal = Credentials(secret=secret, base_url=base_url).authenticate()
        return Credentials(secret=secret, base_url=base_url, principal=principal)
    except RelayError as exc:  # a suspended account: 403, as the API answers it
        response = json_error_response(exc)
        return response.status_code, response.content, []
    except exceptions.AuthenticationFailed:  # unknown or revoked
        return refused


FOREIGN_ORIGIN = (b'{"code":"forbidden","message":"Requests from a web page of another origin are refused: the Origin '
                  b'must be the address this server was reached at."}')
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(value: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of a serialized origin (RFC 6454): http(s), a host, an
    optional port, nothing else (no user, no path). None for anything else ("null")."""
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    if (parts.scheme not in _DEFAULT_PORTS or not parts.hostname or "@" in parts.netloc or parts.path not in ("", "/")
            or parts.query or parts.fragment):
        return None
    return parts.scheme, parts.hostname.lower(), port or _DEFAULT_PORTS[parts.scheme]


def origin_allowed(scope) -> bool:
    """A browser's request is served only from exactly its own origin, RELAY_PUBLIC_URL's or
    one of RELAY_MCP_ALLOWED_ORIGINS; ALLOWED_HOSTS plays no part."""
    headers = dict(scope["headers"])
    sent = headers.get(b"origin")
    if sent is None:
        return True
    origin = _origin(sent.decode("latin-1"))
    if origin is None:
        return False
    own = {_origin(settings.RELAY_PUBLIC_URL),
           *(_origin(allowed) for allowed in settings.RELAY_MCP_ALLOWED_ORIGINS)}
    host = headers.get(b"host", b"").decode("latin-1")
    if host:
        own.add(_origin(f"{scope.get('scheme', 'http')}://{host}"))
    return origin in own - {None}


def _base_url(scope) -> str:
    """Where this request reached Relay, for the download URLs in its answers."""
    host = dict(scope["headers"]).get(b"host", b"").decode("latin-1") or settings.RELAY_PUBLIC_URL.split("//", 1)[1]
    return f"{scope.get('scheme', 'http')}://{host}"


async def _watch_for_hang_up(receive, gone: asyncio.Event) -> None:
    """Set `gone` when the client disconnects (the body read, the next message is that)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    if not gone.is_set():
        logger.debug("an MCP request's connection closed; calls still in flight end")
        gone.set()


async def _refuse(send, status: int, body: bytes, headers: list) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": "http.response.body", "body": body})


class CredentialsGate:
    """The API's refusals for `/mcp` (403 from another origin, 405 but for POST, 401, 403 for
    a suspended account); everything else goes to the SDK."""

    def __init__(self, app) -> None:
        self.app = app
        self.authenticate = in_pool(_credentials_for)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            if not origin_allowed(scope):
                await _refuse(send, 403, FOREIGN_ORIGIN, [])
                return
            if scope["method"] != "POST":
                await _refuse(send, 405, NOT_ALLOWED, [(b"allow", b"POST")])
                return
            authorization = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
            credentials = await self.authenticate(authorization, _base_url(scope))
            if not isinstance(credentials, Credentials):
                await _refuse(send, *credentials)
                return
            body, messages = await _whole_body(receive)
            tool = _tool_of(body)
            needed = TOOL_SCOPES.get(tool)
            if tool in TOOL_SCOPES and not credentials.principal.may(needed):
                # An HTTP 403 the client can act on (ask for the scope), not a tool's error.
                refusal = error_body(403, str(InsufficientScope(needed).detail))
                await _refuse(send, 403, json.dumps(refusal).encode(),
                              [(b"www-authenticate", insufficient_scope(needed).encode())])
                return

            async def replay():
                return messages.pop(0) if messages else await receive()

            # The tools act for these credentials (api/agents/declare.py).
            CREDENTIALS.set(credentials)
            await self.answer(scope, replay, send)
            return
        await self.app(scope, receive, send)

    async def answer(self, scope, receive, send) -> None:
        """Let the SDK answer while watching for the client going away: a call in flight (a
        held wait) must end with its client (CLIENT_GONE)."""
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
