"""`manage.py runmcp`: the MCP server over stdio (docs/agents.md), for an agent that starts
Relay's tools as a subprocess beside it. It acts as the owner of the key (or mailbox
token) in RELAY_API_KEY. `--key` works too, but a command line shows in every process
list on the machine, so the environment is the documented way."""
import logging

import anyio
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from accounts import identity
from accounts.errors import Forbidden
from api.agents.server import build
from api.agents.declare import CREDENTIALS, Credentials

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Serve Relay's MCP tools over stdio, as the owner of RELAY_API_KEY (an API key or a mailbox token)."

    def add_arguments(self, parser):
        parser.add_argument("--key", default="",
                            help="The key, when RELAY_API_KEY is not set; it then shows in process lists")

    def handle(self, *args, key: str, **options):
        if key:
            logger.warning("--key shows the key in process lists; set RELAY_API_KEY instead")
        key = (key or settings.RELAY_API_KEY).strip()
        if not key:
            raise CommandError("Set RELAY_API_KEY to the key to act with (rk_… or rt_…).")
        try:
            if identity.authenticate(key) is None:
                raise CommandError("That key is unknown or revoked.")
        except Forbidden as refusal:  # a suspended account's key: the same words the API answers
            raise CommandError(refusal.message) from None
        # Each call authenticates the key again: a key revoked mid-session is refused.
        CREDENTIALS.set(Credentials(secret=key, base_url=settings.RELAY_PUBLIC_URL.rstrip("/")))
        logger.info("serving the MCP tools over stdio")
        # stdout carries the protocol: nothing else may be printed there.
        anyio.run(build().run_stdio_async)
