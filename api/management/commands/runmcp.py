"""`manage.py runmcp --key KEY`: the MCP server over stdio (docs/agents.md), for an agent
that starts Relay's tools as a subprocess beside it. It acts as the owner of the key (or
mailbox token) given, or of RELAY_API_KEY."""
import logging

import anyio
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from api.agents import tools
from api.agents.dispatch import Caller
from api.agents.server import build
from mailboxes.keys import caller_for_secret

logger = logging.getLogger(__name__)


def _a_served_host() -> str:
    """A host the API answers to (ALLOWED_HOSTS), for the requests the tools make."""
    for host in settings.ALLOWED_HOSTS:
        if host != "*":
            return host.lstrip(".")
    return "localhost"


class Command(BaseCommand):
    help = "Serve Relay's MCP tools over stdio, as the owner of --key (or RELAY_API_KEY)."

    def add_arguments(self, parser):
        parser.add_argument("--key", default=settings.RELAY_API_KEY,
                            help="An API key (rk_…) or a mailbox token (rt_…); default: RELAY_API_KEY")

    def handle(self, *args, key: str, **options):
        key = key.strip()
        if not key:
            raise CommandError("Give the key to act with: --key rk_… or RELAY_API_KEY.")
        if caller_for_secret(key) is None:
            raise CommandError("That key is unknown or revoked.")
        tools.stdio_caller = Caller(authorization=f"Bearer {key}", host=_a_served_host())
        logger.info("serving the MCP tools over stdio")
        # stdout carries the protocol: nothing else may be printed there.
        anyio.run(build().run_stdio_async)
