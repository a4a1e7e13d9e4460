"""Who a tool call acts for, and whether its MCP client is still there.

Over HTTP the gate (api/agents/server.py) authenticates each request before the SDK sees
it and sets CREDENTIALS for the tools that request runs; over stdio `manage.py runmcp`
sets them once, from its key, and every call authenticates that key again, so a key
revoked mid-session is refused on its next call. A tool that holds a wait authenticates
again after each wake-up (api/waiting.py), whichever transport it came by."""
import asyncio
import contextlib
from contextvars import ContextVar
from dataclasses import dataclass

from django.conf import settings
from rest_framework import exceptions

from api.authentication import Principal
from mailboxes.keys import caller_for_secret


class ClientGone(Exception):
    """The MCP client went away before the call answered; the call was cancelled."""


@dataclass(frozen=True)
class Credentials:
    """A caller's secret (an API key or a mailbox token), as found a moment ago
    (`principal`, None over stdio until a call authenticates it), and where it reaches
    the API (`base_url`, no final slash: a message's download URLs start with it)."""

    secret: str
    base_url: str
    principal: Principal | None = None

    def authenticate(self) -> Principal:
        """Who the secret belongs to now: AuthenticationFailed (401) once it is revoked,
        AccountSuspended (403) for a suspended account."""
        caller = caller_for_secret(self.secret, audience=settings.RELAY_MCP_RESOURCE)
        if caller is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked API key.")
        return Principal.of(caller)


CREDENTIALS: ContextVar[Credentials | None] = ContextVar("relay_mcp_credentials", default=None)
# Set when the MCP client whose request this call serves has hung up (the gate sets it;
# the tools run in tasks that inherit the request's context): a held call ends.
CLIENT_GONE: ContextVar[asyncio.Event | None] = ContextVar("relay_mcp_client_gone", default=None)


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
