"""The MCP tools (docs/agents.md), each a door like a route: typed arguments, the route's
serializer for formats, the same service; errors start with the API's code."""
import base64
import math
import uuid
from typing import Annotated, Any, Literal

from django.conf import settings
from django.urls import reverse
from mcp_types import CallToolResult
from pydantic import Field

from api.agents.declare import (MINUTE_MS, Attachment, Code, Deleted, DeliveryWaited, FaultRulesOut, MailboxList,
                                MailboxOut, MessageList, MessageOut, SandboxOut, Waited, calling, calling_owner,
                                credentials, failure, minutes_to_ms, result, tool, until_client_gone)
from api.authentication import Principal
from api.pagination import PAGE_SIZE
from core.pools import in_pool
from api.serializers import (
    DeliverySerializer,
    FaultRuleShownSerializer,
    MailboxSerializer,
    MessageDetailSerializer,
    MessageSummarySerializer,
)
from mailboxes.errors import NotFound
from mailboxes.faults import faults_set
from mailboxes.lifecycle import (TAGS_MAX, TAG_PATTERN, labels_checked, mailbox_create, mailbox_delete, mailbox_renew,
                                 smtp_settings)
from mailboxes.messages import message_mark_read
from mailboxes.models import Direction, Mailbox
from relay import live, reading
from relay.backends import get_backend
from relay.inbound.attachments import attachment_of, safe_charset, served_content_type, without_format_characters
from relay.outbox.delivery import delivery_final, delivery_of

# Larger attachments are only offered as a download URL: their bytes, base64 in a JSON
# result, would fill a model's context for nothing.
ATTACHMENT_INLINE_BYTES = 1024 * 1024
WAIT_DEFAULT_SECONDS = 30
WAIT_MAX_SECONDS = 60
LISTED_MAX = PAGE_SIZE
TTL_MIN_MINUTES = math.ceil(settings.RELAY_MIN_TTL_MS / MINUTE_MS)

# --- arguments ------------------------------------------------------------------------------------
MailboxId = Annotated[uuid.UUID, Field(description="The mailbox's id (a UUID), as create_mailbox or "
                                                   "list_mailboxes gave it.")]
MessageId = Annotated[int, Field(description="The message's id, as list_messages or wait_for_message gave it.",
                                 ge=1)]
TtlMinutes = Annotated[int | None, Field(description=f"Minutes the mailbox lives from now, at least "
                                                     f"{TTL_MIN_MINUTES}; the plan's default when omitted. The plan "
                                                     f"caps it.", ge=TTL_MIN_MINUTES)]
Timeout = Annotated[int, Field(description=f"Seconds to wait at most, 0 to {WAIT_MAX_SECONDS}.", ge=0,
                               le=WAIT_MAX_SECONDS)]
FromFilter = Annotated[str | None, Field(alias="from", description="Only mail whose From header or envelope sender "
                                                                   "contains this text.")]
SubjectFilter = Annotated[str | None, Field(description="Only mail whose subject contains this text.")]
Authenticated = Annotated[bool, Field(description="Only mail whose sender is proven (SPF, DKIM and DMARC: verdict "
                                                  "pass); a forged From is passed over.")]
After = Annotated[int | None, Field(description="Only messages received after this message id (one of the "
                                                "mailbox's). Omit it to accept a message already there.", ge=1)]
Rcpt = Annotated[str | None, Field(description="Only mail to this envelope recipient, the whole address in any case "
                                               "(a sandbox's catch: any of its RCPT TO, Bcc included; other mail: "
                                               "the address it came to).")]


def _mailbox_out(mailbox: Mailbox) -> dict:
    return MailboxSerializer.represent(mailbox)


# --- mailboxes ----------------------------------------------------------------------------------
@tool(output=MailboxOut)
def create_mailbox(ttl_minutes: TtlMinutes = None,
                   local_part: Annotated[str | None, Field(description="The part before @: 1-64 of a-z 0-9 . _ -; "
                                                                       "random when omitted.")] = None,
                   name: Annotated[str | None, Field(description="A label for you, up to 100 characters.")] = None,
                   tags: Annotated[list[str] | None, Field(description=f"Up to {TAGS_MAX} tags of "
                                                                        f"{TAG_PATTERN.strip('^$')}.")] = None,
                   domain: Annotated[str | None, Field(description="Relay's own domain when omitted, or one of your "
                                                                   "verified domains (list_domains).")] = None,
                   ) -> CallToolResult:
    """Create a disposable mailbox that receives mail at once and stops when its lifetime
    ends. Returns the mailbox: id, address (give this address to the service that should
    mail you), status, created_at, expires_at, message_count, name, tags. Errors:
    quota_exceeded (too many live mailboxes), conflict (the address was used before or is
    taken on the mail server), invalid_request (a bad argument), forbidden (a mailbox
    token cannot create mailboxes)."""
    owner = calling_owner()
    labels = labels_checked({field: value for field, value in (("name", name), ("tags", tags))
                             if value is not None})
    mailbox, _ = mailbox_create(backend=get_backend(), caller=owner, local_part=local_part, domain=domain,
                                ttl_ms=minutes_to_ms(ttl_minutes), labels=labels)
    return result(_mailbox_out(mailbox))


@tool(output=MailboxList, read_only=True, idempotent=True)
def list_mailboxes(include_expired: Annotated[bool, Field(
        description="Also list mailboxes that have expired (still kept for a while).")] = False) -> CallToolResult:
    """List your mailboxes, newest first: {"mailboxes": [mailbox, ...]}. Active ones only
    unless include_expired."""
    mailboxes = reading.mailbox_list(caller=calling(), include_expired=include_expired)
    return result({"mailboxes": [_mailbox_out(mailbox) for mailbox in mailboxes]})


@tool(output=MailboxOut, read_only=True, idempotent=True)
def get_mailbox(mailbox_id: MailboxId) -> CallToolResult:
    """One mailbox: its address, status (active or expired), expires_at and message_count.
    Errors: not_found (no such mailbox of yours, or deleted)."""
    return result(_mailbox_out(reading.mailbox_open(caller=calling(), mailbox_id=mailbox_id, live=False)))


@tool(output=MailboxOut, idempotent=True)
def renew_mailbox(mailbox_id: MailboxId, ttl_minutes: TtlMinutes = None) -> CallToolResult:
    """Extend a live mailbox: it now expires ttl_minutes from now. Returns the mailbox.
    Errors: expired (too late: an expired mailbox cannot be renewed), not_found,
    invalid_request (ttl_minutes over the plan's cap)."""
    principal = calling()
    mailbox = reading.mailbox_open(caller=principal, mailbox_id=mailbox_id)
    return result(_mailbox_out(mailbox_renew(mailbox=mailbox, plan=principal.plan,
                                             ttl_ms=minutes_to_ms(ttl_minutes))))


@tool(output=Deleted, destructive=True, idempotent=False)
def delete_mailbox(mailbox_id: MailboxId) -> CallToolResult:
    """Delete a mailbox now: it stops receiving, its mail is gone, and it cannot be
    undone. Returns {"deleted": true}. Errors: not_found."""
    mailbox_delete(mailbox=reading.mailbox_open(caller=calling(), mailbox_id=mailbox_id, live=False))
    return result({"deleted": True})


# --- sandboxes (docs/sandbox.md) ------------------------------------------------------------------
@tool(output=SandboxOut)
def create_sandbox(ttl_minutes: TtlMinutes = None,
                   local_part: Annotated[str | None, Field(description="The part before @: 1-64 of a-z 0-9 . _ -; "
                                                                       "random when omitted.")] = None,
                   ) -> CallToolResult:
    """Create a sandbox: a mailbox that also catches every mail an app submits with its
    SMTP settings, to anyone, and never delivers it. Returns the mailbox with "smtp":
    {host, port, username, password, security} to configure the app with; the password is
    shown only here. Read what it caught with list_messages and wait_for_message (each
    message's envelope lists every recipient, Bcc included). Errors: quota_exceeded,
    conflict, invalid_request, forbidden (a mailbox token cannot create mailboxes)."""
    owner = calling_owner()
    mailbox, _ = mailbox_create(backend=get_backend(), caller=owner, local_part=local_part, domain=None,
                                ttl_ms=minutes_to_ms(ttl_minutes), sandbox=True)
    return result({**_mailbox_out(mailbox), "smtp": smtp_settings(mailbox=mailbox, password=mailbox.smtp_password)})


FaultRules = Annotated[list[dict[str, Any]], Field(
    description='Rules, at most 20, each {"stage": "auth"|"mail"|"rcpt"|"data", "code": 400-599, "message"?: text, '
                '"match"?: glob on the address, "probability"?: 0-1, "times"?: answers before it is spent, '
                '"delay_seconds"?: 0-30}. An empty list removes them all.')]


@tool(output=FaultRulesOut, idempotent=True)
def set_faults(mailbox_id: MailboxId, rules: FaultRules) -> CallToolResult:
    """Replace a sandbox's fault rules: its SMTP submission port then answers those codes
    at those stages (to test an app's retries), e.g. [{"stage": "rcpt", "code": 451,
    "times": 2}] refuses the next two recipients with 451. Returns {"rules": [...]}, each
    with "remaining" (what is left of times). Errors: invalid_request (a bad rule, or a
    mailbox that is not a sandbox), not_found, expired."""
    mailbox = reading.mailbox_open(caller=calling(), mailbox_id=mailbox_id)
    return result({"rules": [FaultRuleShownSerializer.of(rule) for rule in faults_set(mailbox=mailbox, rules=rules)]})


# --- messages ------------------------------------------------------------------------------------
def _listed(*, caller: Principal, mailbox: Mailbox | None, words: str | None, unread: bool = False,
            authenticated: bool = False, direction: str | None = None, rcpt: str | None = None) -> dict:
    """The newest LISTED_MAX messages matching the search route's filters, in `mailbox` or
    in all of the caller's."""
    search = reading.search_checked(words=words, unread=unread, authenticated=authenticated, direction=direction,
                                    rcpt=rcpt)
    with reading.messages_read(caller=caller, mailbox=mailbox, search=search) as rows:
        return {"messages": MessageSummarySerializer.represent_many(rows[:LISTED_MAX])}


@tool(output=MessageList, read_only=True, idempotent=True, mail=True)
def list_messages(mailbox_id: MailboxId,
                  query: Annotated[str | None, Field(description="Words that must all be in the subject or "
                                                                 "text.")] = None,
                  unread: Annotated[bool, Field(description="Only messages not read yet.")] = False,
                  authenticated: Authenticated = False,
                  direction: Annotated[Literal["in", "out"] | None, Field(
                      description="in: only mail received; out: only mail sent from the mailbox. Both when "
                                  "omitted.")] = None,
                  rcpt: Rcpt = None,
                  ) -> CallToolResult:
    """The 50 newest messages of a mailbox, received and sent: {"messages": [{id, from,
    to, subject, received_at, size, is_read, has_attachments, authenticated, direction,
    thread_id}, ...]}. Use get_message for a body. Errors: expired (the mailbox ended),
    not_found."""
    caller = calling()
    mailbox = reading.mailbox_open(caller=caller, mailbox_id=mailbox_id, fresh=True)
    return result(_listed(caller=caller, mailbox=mailbox, words=query, unread=unread,
                          authenticated=authenticated, direction=direction, rcpt=rcpt))


@tool(output=MessageOut, idempotent=True, mail=True)
def get_message(mailbox_id: MailboxId, message_id: MessageId) -> CallToolResult:
    """One message whole, and marks it read: from, subject, text, html, headers, codes
    (one-time codes found in it, most likely first), links, attachments (id, filename,
    content_type, size, download_url), and its place in the conversation: direction (in
    or out), thread_id, message_id, in_reply_to, references, cc, reply_to; sent mail
    also has outbox_status and delivery (each recipient's state: see wait_for_delivery).
    Errors: not_found, expired."""
    mailbox = reading.mailbox_open(caller=calling(), mailbox_id=mailbox_id)
    message = reading.message_get(mailbox=mailbox, message_id=message_id)
    message_mark_read(message=message)
    return result(MessageDetailSerializer(message, context={"base_url": credentials().base_url}).data)


async def _first_message(mailbox_id: uuid.UUID, *, wait: int, after: int | None, from_: str | None,
                         subject: str | None, authenticated: bool, with_code: bool,
                         rcpt: str | None = None) -> dict | None:
    """The first message to match, held up to `wait` seconds by the wait route's own code
    (relay.live.first_message); it ends when the MCP client hangs up."""
    found = credentials()
    caller = found.principal or await in_pool(found.authenticate)()
    search = reading.search_checked(sender=from_, subject=subject, after=after, authenticated=authenticated,
                                    rcpt=rcpt)
    return await until_client_gone(live.first_message(
        caller=caller, authenticate=found.authenticate, mailbox_id=mailbox_id, seconds=wait, search=search,
        with_code=with_code, render=lambda message: MessageDetailSerializer(
            message, context={"base_url": found.base_url}).data))


# Each call may take a message (marked read): not idempotent, since a second call may
# find a newer message.
@tool(output=Waited, mail=True)
async def wait_for_message(mailbox_id: MailboxId, timeout_seconds: Timeout = WAIT_DEFAULT_SECONDS,
                            from_: FromFilter = None, subject: SubjectFilter = None, after: After = None,
                           authenticated: Authenticated = False, rcpt: Rcpt = None,
                            ) -> CallToolResult:
    """Wait for mail: the first message matching the filters that was received after
    `after` (one already there counts), as soon as it arrives, marked read. Returns
    {"message": the message whole, as get_message gives it}, or {"message": null} if none
    came within timeout_seconds. Errors: expired (the mailbox ended while waiting),
    not_found, rate_limited (too many waits open at once)."""
    message = await _first_message(mailbox_id, wait=timeout_seconds, after=after, from_=from_, subject=subject,
                                   authenticated=authenticated, with_code=False, rcpt=rcpt)
    return result({"message": message})


@tool(output=Code, mail=True)
async def wait_for_code(mailbox_id: MailboxId, timeout_seconds: Timeout = WAIT_DEFAULT_SECONDS,
                         from_: FromFilter = None, subject: SubjectFilter = None, after: After = None,
                        authenticated: Authenticated = False, rcpt: Rcpt = None,
                         ) -> CallToolResult:
    """Wait for a verification code: the first message matching the filters, received
    after `after` (one already there counts), that holds a one-time code. Returns
    {"code": the most likely code, "codes": all found, "message_id", "from", "subject"},
    or {"code": null} if none came within timeout_seconds. Messages without a code are
    passed over. Errors: expired, not_found, rate_limited."""
    message = await _first_message(mailbox_id, wait=timeout_seconds, after=after, from_=from_, subject=subject,
                                   authenticated=authenticated, with_code=True, rcpt=rcpt)
    if message is None:
        return result({"code": None})
    return result({"code": message["codes"][0], "codes": message["codes"], "message_id": message["id"],
                   "from": message["from"], "subject": message["subject"]})


def _delivery(mailbox: Mailbox, message_id: int) -> list[dict]:
    """Each recipient's state of message `message_id`, which `mailbox` sent."""
    message = reading.message_get(mailbox=mailbox, message_id=message_id)
    if message.direction != Direction.OUT:
        raise NotFound("That message was received, not sent: only mail the mailbox sent has a delivery.")
    return DeliverySerializer(delivery_of(getattr(message, "outbox_mail", None)), many=True).data


def _delivery_now(caller, mailbox_id: uuid.UUID, message_id: int) -> list[dict]:
    return _delivery(reading.mailbox_open(caller=caller, mailbox_id=mailbox_id), message_id)


@tool(output=DeliveryWaited, read_only=True)
async def wait_for_delivery(mailbox_id: MailboxId, message_id: MessageId,
                            timeout_seconds: Timeout = WAIT_DEFAULT_SECONDS) -> CallToolResult:
    """What became of a message the mailbox sent (message_id: the id send_message,
    reply_to_message or forward_message gave), held until every recipient's state is
    final (sent, failed, bounced, complained) or timeout_seconds pass. Returns
    {"delivery": [{"recipient", "status", "smtp_code", "detail", "at"}], "final": true|false};
    the time running out is not an error. status: queued, sent (the next hop took it),
    deferred (a 4xx, retried), failed (refused, or retries spent), bounced, complained.
    Errors: not_found (no such message, or one received), expired."""
    found = credentials()
    caller = found.principal or await in_pool(found.authenticate)()
    await in_pool(_delivery_now)(caller, mailbox_id, message_id)  # a wrong id fails at once

    def final(mailbox: Mailbox) -> list[dict] | None:
        delivery = _delivery(mailbox, message_id)
        return delivery if delivery_final(delivery) else None

    _, delivery = await until_client_gone(live.wait_until_found(
        caller=caller, authenticate=found.authenticate, mailbox_id=mailbox_id, seconds=timeout_seconds, look=final))
    if delivery is not None:
        return result({"delivery": delivery, "final": True})
    delivery = await in_pool(lambda: _delivery_now(found.authenticate(), mailbox_id, message_id))()
    return result({"delivery": delivery, "final": delivery_final(delivery)})


@tool(output=MessageList, read_only=True, idempotent=True, mail=True)
def search_messages(query: Annotated[str, Field(description="Words that must all be in the subject or text.")],
                    mailbox_id: Annotated[uuid.UUID | None, Field(description="Only this mailbox (its UUID); all of "
                                                                              "yours when omitted.")] = None,
                    ) -> CallToolResult:
    """Search your mail, newest first, in one mailbox or all of yours (expired ones too,
    while kept): {"messages": [list items, each with mailbox_id]}, the 50 best."""
    caller = calling()
    if mailbox_id is not None:
        mailbox = reading.mailbox_open(caller=caller, mailbox_id=mailbox_id, fresh=True)
        return result(_listed(caller=caller, mailbox=mailbox, words=query))
    reading.mailboxes_freshen(caller)
    return result(_listed(caller=caller, mailbox=None, words=query))


@tool(output=Attachment, read_only=True, idempotent=True, mail=True)
def get_attachment(mailbox_id: MailboxId, message_id: MessageId,
                   attachment_id: Annotated[int, Field(description="The attachment's id in the message's "
                                                                   "attachments.", ge=1)]) -> CallToolResult:
    """An attachment's contents: {"filename", "content_type", "size", "text"} for a text
    attachment (decoded), else {"filename", "content_type", "size", "content_base64"}.
    Over 1 MiB: a too_large error naming its download_url (fetch it over HTTP with your
    key). Errors: not_found, expired."""
    mailbox = reading.mailbox_open(caller=calling(), mailbox_id=mailbox_id)
    found = attachment_of(reading.message_raw(mailbox=mailbox, message_id=message_id), attachment_id)
    if found is None:
        raise NotFound(f"The message has no attachment {attachment_id}.")
    meta, payload = found
    if len(payload) > ATTACHMENT_INLINE_BYTES:
        path = reverse("message-attachment", kwargs={"mailbox_id": mailbox.id, "message_id": message_id,
                                                     "attachment_id": attachment_id})
        return failure("too_large", f"The attachment is {len(payload)} bytes, over 1 MiB; download it from "
                                    f"{credentials().base_url}{path} with your key.")
    served = served_content_type(meta["content_type"], meta.get("charset"))
    described = {"filename": without_format_characters(meta.get("filename")), "content_type": meta["content_type"],
                 "size": len(payload)}
    if served.startswith("text/"):
        return result({**described, "text": payload.decode(safe_charset(meta.get("charset")), "replace")})
    return result({**described, "content_base64": base64.b64encode(payload).decode()})


TOOLS = [create_mailbox, list_mailboxes, get_mailbox, renew_mailbox, delete_mailbox, list_messages, get_message,
         wait_for_message, wait_for_code, wait_for_delivery, search_messages, get_attachment, create_sandbox, set_faults]
