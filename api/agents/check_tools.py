"""The MCP tool for message checks (docs/checks.md): the four checks of the routes under
…/messages/{mid}/checks/, in one call."""
import asyncio
import time
import uuid
from functools import partial
from typing import Annotated, Literal

from mcp_types import CallToolResult
from pydantic import Field

from api.agents.declare import Checks, calling, result, tool
from api.agents.tools import MailboxId, MessageId
from api.errors import error_of
from core.pools import SPAM_CHECKS, PoolFull, in_pool
from checks import message_checks
from mailboxes.errors import RateLimited, RelayError
from mailboxes.models import Mailbox
from relay import reading

LINKS_WAIT_SECONDS = 30
LINKS_POLL_SECONDS = 0.25
Check = Literal["html", "links", "spam", "headers"]


def _failed(exc: RelayError | PoolFull) -> dict:
    _, body = error_of(exc)
    return {"error": f"{body['code']}: {body['message']}"}


def _now(mailbox_id: uuid.UUID, message_id: int, checks: list[str]) -> tuple[dict, Mailbox, bytes | None]:
    """The checks that need no waiting, the links' start, the mailbox and the raw bytes
    (read once, for the HTML check and spamd)."""
    mailbox = reading.mailbox_open(caller=calling(), mailbox_id=mailbox_id)
    found = {}
    raw = reading.message_raw(mailbox=mailbox, message_id=message_id) if {"html", "spam"} & set(checks) else None
    if "html" in checks:
        content_id = reading.message_get(mailbox=mailbox, message_id=message_id).content_id
        found["html"] = message_checks.html_of(raw, content_id=content_id)
    if "headers" in checks:
        found["headers"] = message_checks.headers_check(mailbox=mailbox, message_id=message_id)
    if "links" in checks:
        try:
            found["links"] = message_checks.links_start(mailbox=mailbox, message_id=message_id)
        except RateLimited as exc:  # the account's bound on link checks: this check alone
            found["links"] = _failed(exc)
    return found, mailbox, raw


def _links(mailbox_id: uuid.UUID, message_id: int) -> dict:
    mailbox = reading.mailbox_open(caller=calling(), mailbox_id=mailbox_id)
    return message_checks.links_result(mailbox=mailbox, message_id=message_id)


# Not read-only: a links check replaces the message's stored one.
@tool(output=Checks, open_world=True, mail=True)
async def check_message(mailbox_id: MailboxId, message_id: MessageId,
                        checks: Annotated[list[Check] | None, Field(
                            description="Which checks: html, links, spam, headers; all four when omitted.",
                            min_length=1, max_length=4)] = None,
                        ) -> CallToolResult:
    """Check a received message as a sender testing its own mail would: "html" (the HTML and
    CSS features it uses that some email clients lack, from caniemail's data, and a score
    per client family), "links" (each link's HTTP answer, after redirects; waits up to 30 s),
    "spam" (SpamAssassin's score and rules) and "headers" (one-click unsubscribe, Message-ID,
    Date, DKIM aligned with From). Returns one entry per check asked; a check that cannot
    run here is {"error": "not_configured: …"} or {"error": "backend_unavailable: …"}, and
    one past the account's bounds on spam and link checks {"error": "rate_limited: …"}.
    Errors: not_found, expired."""
    wanted = list(dict.fromkeys(checks or message_checks.KINDS))
    found, mailbox, raw = await in_pool(_now)(mailbox_id, message_id, wanted)
    if "spam" in wanted:
        try:
            found["spam"] = await in_pool(partial(message_checks.spam_check, mailbox=mailbox, raw=raw), SPAM_CHECKS)()
        except (RelayError, PoolFull) as exc:
            found["spam"] = _failed(exc)
    if "links" in found and "error" not in found["links"]:
        deadline = time.monotonic() + LINKS_WAIT_SECONDS
        while found["links"]["status"] != "done" and time.monotonic() < deadline:
            await asyncio.sleep(LINKS_POLL_SECONDS)
            found["links"] = await in_pool(_links)(mailbox_id, message_id)
    return result({kind: found[kind] for kind in wanted})


CHECK_TOOLS = [check_message]
