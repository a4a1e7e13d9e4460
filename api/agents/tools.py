"""The MCP tools (docs/agents.md): one per thing an agent does with a mailbox, each a call
of the API route that does it (api/agents/dispatch.py), answering the API's JSON. The two
waits run the wait route's own code (api.waiting.first_message) and answer the message
they find whole, from the same look.

A route's error becomes a tool error (`isError`) whose text starts with the API's code
(`expired: …`, `not_found: …`), so a model can act on it. The descriptions are written
for the model that picks the tools: what each does, its arguments, what comes back."""
import base64
import inspect
import json
from typing import Annotated, Any

from mcp.server.mcpserver import Context
from mcp_types import CallToolResult, TextContent
from pydantic import Field

from rest_framework import exceptions

from api import waiting
from api.agents.dispatch import AUTHENTICATED, Answer, Caller, ClientGone, call, request_for, until_client_gone
from mailboxes.errors import RelayError

# Larger attachments are only offered as a download URL: their bytes, base64 in a JSON
# result, would fill a model's context for nothing.
ATTACHMENT_INLINE_BYTES = 1024 * 1024
WAIT_DEFAULT_SECONDS = 30
WAIT_MAX_SECONDS = 60

FORWARDED = ("x-forwarded-for", "x-forwarded-proto")
# The caller of a stdio server (manage.py runmcp): its key, set once at start.
stdio_caller: Caller | None = None

MailboxId = Annotated[str, Field(description="The mailbox's id (a UUID), as create_mailbox or list_mailboxes gave it.")]
MessageId = Annotated[int, Field(description="The message's id, as list_messages or wait_for_message gave it.")]
TtlMinutes = Annotated[int | None, Field(description="Minutes the mailbox lives from now; the plan's default when "
                                                     "omitted. The plan caps it.", ge=1)]
Timeout = Annotated[int, Field(description=f"Seconds to wait at most, 0 to {WAIT_MAX_SECONDS}.", ge=0,
                               le=WAIT_MAX_SECONDS)]
FromFilter = Annotated[str | None, Field(alias="from", description="Only mail whose From header or envelope sender "
                                                                   "contains this text.")]
SubjectFilter = Annotated[str | None, Field(description="Only mail whose subject contains this text.")]
After = Annotated[int | None, Field(description="Only messages received after this message id (one of the "
                                                "mailbox's). Omit it to accept a message already there.")]


# --- plumbing ---------------------------------------------------------------------------------
def caller_of(ctx: Context) -> Caller:
    """The caller as the API will see it: the HTTP request's credentials, host and
    address, or the stdio server's key."""
    headers = ctx.headers
    if headers is None:
        if stdio_caller is None:
            raise RuntimeError("no caller: the stdio server was started without a key")
        return stdio_caller
    request = ctx.request_context.request
    client = getattr(request, "client", None)
    forwarded = tuple((name, headers[name]) for name in FORWARDED if headers.get(name))
    return Caller(authorization=headers.get("authorization", ""), host=headers.get("host", "localhost"),
                  address=client.host if client else "127.0.0.1", forwarded=forwarded)


def result(data: dict) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(data))], structured_content=data)


def failure(code: str, message: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=f"{code}: {message}")], is_error=True)


class ApiError(Exception):
    """A route answered with an error: it ends the tool as a tool error."""

    def __init__(self, answer: Answer) -> None:
        body = answer.json() if answer.headers.get("content-type", "").startswith("application/json") else None
        body = body if isinstance(body, dict) else {}
        self.code = body.get("code", "error")
        message = body.get("message", f"HTTP {answer.status}")
        for name, problems in (body.get("fields") or {}).items():
            message += f" {name}: {' '.join(problems) if isinstance(problems, list) else problems}"
        super().__init__(message)


async def api(ctx: Context, method: str, path: str, **kwargs) -> Any:
    answer = await call(caller_of(ctx), method, path, **kwargs)
    if answer.status >= 400:
        raise ApiError(answer)
    return answer.json()


def tool(fn):
    """A tool whose ApiError is a tool error, and whose arguments may be named as
    Python cannot (`from`): the signature the SDK reads says `from`, the function gets
    `from_`."""
    signature = inspect.signature(fn)

    async def run(**arguments):
        if "from" in arguments:
            arguments["from_"] = arguments.pop("from")
        try:
            return await fn(**arguments)
        except ApiError as exc:
            return failure(exc.code, str(exc))
        except ClientGone:  # nobody will read it; the route's call was cancelled
            return failure("cancelled", "The client went away.")

    run.__name__, run.__doc__, run.__annotations__ = fn.__name__, fn.__doc__, fn.__annotations__
    run.__signature__ = signature
    return run


# --- mailboxes ----------------------------------------------------------------------------------
@tool
async def create_mailbox(ctx: Context, ttl_minutes: TtlMinutes = None,
                         local_part: Annotated[str | None, Field(description="The part before @: 1-64 of a-z 0-9 . _ -; "
                                                                             "random when omitted.")] = None,
                         name: Annotated[str | None, Field(description="A label for you, up to 100 characters.")] = None,
                         tags: Annotated[list[str] | None, Field(description="Up to 10 tags of [a-z0-9_-]{1,32}.")] = None,
                         ) -> CallToolResult:
    """Create a disposable mailbox that receives mail at once and stops when its lifetime
    ends. Returns the mailbox: id, address (give this address to the service that should
    mail you), status, created_at, expires_at, message_count, name, tags. Errors:
    quota_exceeded (too many live mailboxes), conflict (the address was used before),
    invalid_request (a bad argument)."""
    body = {"local_part": local_part, "name": name, "tags": tags,
            "ttl_ms": ttl_minutes * 60_000 if ttl_minutes is not None else None}
    return result(await api(ctx, "POST", "/mailboxes", body={k: v for k, v in body.items() if v is not None}))


@tool
async def list_mailboxes(ctx: Context, include_expired: Annotated[bool, Field(
        description="Also list mailboxes that have expired (still kept for a while).")] = False) -> CallToolResult:
    """List your mailboxes, newest first: {"mailboxes": [mailbox, ...]}. Active ones only
    unless include_expired."""
    mailboxes, page = [], 1
    while True:
        answer = await api(ctx, "GET", "/mailboxes", query={"include_expired": include_expired, "page": page,
                                                            "page_size": 200})
        mailboxes += answer["results"]
        if not answer.get("next"):
            return result({"mailboxes": mailboxes})
        page += 1


@tool
async def get_mailbox(ctx: Context, mailbox_id: MailboxId) -> CallToolResult:
    """One mailbox: its address, status (active or expired), expires_at and message_count.
    Errors: not_found (no such mailbox of yours, or deleted)."""
    return result(await api(ctx, "GET", f"/mailboxes/{mailbox_id}"))


@tool
async def renew_mailbox(ctx: Context, mailbox_id: MailboxId, ttl_minutes: TtlMinutes = None) -> CallToolResult:
    """Extend a live mailbox: it now expires ttl_minutes from now. Returns the mailbox.
    Errors: expired (too late: an expired mailbox cannot be renewed), not_found."""
    body = {"ttl_ms": ttl_minutes * 60_000} if ttl_minutes is not None else {}
    return result(await api(ctx, "POST", f"/mailboxes/{mailbox_id}/renew", body=body))


@tool
async def delete_mailbox(ctx: Context, mailbox_id: MailboxId) -> CallToolResult:
    """Delete a mailbox now: it stops receiving and is gone. Returns {"deleted": true}.
    Errors: not_found."""
    await api(ctx, "DELETE", f"/mailboxes/{mailbox_id}")
    return result({"deleted": True})


# --- messages ------------------------------------------------------------------------------------
@tool
async def list_messages(ctx: Context, mailbox_id: MailboxId,
                        query: Annotated[str | None, Field(description="Words that must all be in the subject or "
                                                                        "text.")] = None,
                        unread: Annotated[bool, Field(description="Only messages not read yet.")] = False,
                        ) -> CallToolResult:
    """The 50 newest messages of a mailbox: {"messages": [{id, from, to, subject,
    received_at, size, is_read, has_attachments}, ...]}. Use get_message for a body.
    Errors: expired (the mailbox ended), not_found."""
    answer = await api(ctx, "GET", f"/mailboxes/{mailbox_id}/messages",
                       query={"q": query, "unread": True if unread else None})
    return result({"messages": answer["results"]})


@tool
async def get_message(ctx: Context, mailbox_id: MailboxId, message_id: MessageId) -> CallToolResult:
    """One message whole, and marks it read: from, subject, text, html, headers, codes
    (one-time codes found in it, most likely first), links, attachments (id, filename,
    content_type, size, download_url). Errors: not_found, expired."""
    return result(await api(ctx, "GET", f"/mailboxes/{mailbox_id}/messages/{message_id}"))


async def _first_message(ctx: Context, mailbox_id: str, *, wait: int, after: int | None, from_: str | None,
                         subject: str | None, with_code: bool) -> dict | None:
    """The first message to match, held up to `wait` seconds: the wait route's own code
    (api.waiting.first_message: its wake-up, its open-wait cap, its errors), given the
    caller's request. It ends when the MCP client hangs up."""
    filters = {"after": after, "from": from_, "subject": subject}
    caller = caller_of(ctx)
    request = request_for(caller, f"/mailboxes/{mailbox_id}/messages")
    try:
        return await until_client_gone(waiting.first_message(
            request, mailbox_id, seconds=wait, with_code=with_code, caller=AUTHENTICATED.get(),
            filters={name: value for name, value in filters.items() if value is not None}))
    except (exceptions.APIException, RelayError) as exc:
        response = waiting.error_response(exc)
        raise ApiError(Answer(status=response.status_code, body=response.content,
                              headers={"content-type": response["Content-Type"]})) from None


@tool
async def wait_for_message(ctx: Context, mailbox_id: MailboxId, timeout_seconds: Timeout = WAIT_DEFAULT_SECONDS,
                           from_: FromFilter = None, subject: SubjectFilter = None, after: After = None,
                           ) -> CallToolResult:
    """Wait for mail: the first message matching the filters that was received after
    `after` (one already there counts), as soon as it arrives. Returns {"message": the
    message whole, as get_message gives it}, or {"message": null} if none came within
    timeout_seconds. Errors: expired (the mailbox ended while waiting), not_found,
    rate_limited (too many waits open at once)."""
    message = await _first_message(ctx, mailbox_id, wait=timeout_seconds, after=after, from_=from_,
                                   subject=subject, with_code=False)
    return result({"message": message})


@tool
async def wait_for_code(ctx: Context, mailbox_id: MailboxId, timeout_seconds: Timeout = WAIT_DEFAULT_SECONDS,
                        from_: FromFilter = None, subject: SubjectFilter = None, after: After = None,
                        ) -> CallToolResult:
    """Wait for a verification code: the first message matching the filters, received
    after `after` (one already there counts), that holds a one-time code. Returns
    {"code": the most likely code, "codes": all found, "message_id", "from", "subject"},
    or {"code": null} if none came within timeout_seconds. Messages without a code are
    passed over. Errors: expired, not_found, rate_limited."""
    message = await _first_message(ctx, mailbox_id, wait=timeout_seconds, after=after, from_=from_,
                                   subject=subject, with_code=True)
    if message is None:
        return result({"code": None})
    return result({"code": message["codes"][0], "codes": message["codes"], "message_id": message["id"],
                   "from": message["from"], "subject": message["subject"]})


@tool
async def send_message(ctx: Context, mailbox_id: MailboxId,
                       to: Annotated[list[str], Field(description="1 to 50 recipient addresses.")],
                       subject: Annotated[str, Field(description="One line.")],
                       text: Annotated[str, Field(description="The plain-text body.")]) -> CallToolResult:
    """Send a mail from the mailbox's address. It is queued and leaves within seconds:
    returns {"id", "status": "queued"}. Needs an account's API key (a mailbox token
    cannot send: forbidden). Errors: quota_exceeded (the plan's sends per day), expired."""
    answer = await api(ctx, "POST", f"/mailboxes/{mailbox_id}/messages", body={"to": to, "subject": subject,
                                                                               "text": text})
    return result({"id": answer["id"], "status": answer["status"]})


@tool
async def search_messages(ctx: Context, query: Annotated[str, Field(description="Words that must all be in the "
                                                                                 "subject or text.")],
                          mailbox_id: Annotated[str | None, Field(description="Only this mailbox; all of yours when "
                                                                               "omitted.")] = None) -> CallToolResult:
    """Search your mail, newest first, in one mailbox or all of yours (expired ones too,
    while kept): {"messages": [list items, each with mailbox_id]}, the 50 best."""
    path = f"/mailboxes/{mailbox_id}/messages" if mailbox_id else "/messages"
    return result({"messages": (await api(ctx, "GET", path, query={"q": query}))["results"]})


@tool
async def get_attachment(ctx: Context, mailbox_id: MailboxId, message_id: MessageId,
                         attachment_id: Annotated[int, Field(description="The attachment's id in the message's "
                                                                         "attachments.", ge=1)]) -> CallToolResult:
    """An attachment's contents: {"filename", "content_type", "size", "text"} for a text
    attachment (decoded), else {"filename", "content_type", "size", "content_base64"}.
    Over 1 MiB: a too_large error naming its download_url (fetch it over HTTP with your
    key). Errors: not_found, expired."""
    message = await api(ctx, "GET", f"/mailboxes/{mailbox_id}/messages/{message_id}")
    listed = {item["id"]: item for item in message["attachments"]}
    if attachment_id not in listed:
        return failure("not_found", f"The message has no attachment {attachment_id}.")
    item = listed[attachment_id]
    if item["size"] > ATTACHMENT_INLINE_BYTES:
        return failure("too_large", f"The attachment is {item['size']} bytes, over 1 MiB; download it from "
                                    f"{item['download_url']} with your key.")
    answer = await call(caller_of(ctx), "GET",
                        f"/mailboxes/{mailbox_id}/messages/{message_id}/attachments/{attachment_id}")
    if answer.status >= 400:
        raise ApiError(answer)
    described = {"filename": item["filename"], "content_type": item["content_type"], "size": len(answer.body)}
    served = answer.headers.get("content-type", "")
    if item["content_type"].startswith("text/") or served.startswith("text/"):
        charset = served.partition("charset=")[2] or "utf-8"
        try:
            return result({**described, "text": answer.body.decode(charset, "replace")})
        except LookupError:
            return result({**described, "text": answer.body.decode("utf-8", "replace")})
    return result({**described, "content_base64": base64.b64encode(answer.body).decode()})


TOOLS = [create_mailbox, list_mailboxes, get_mailbox, renew_mailbox, delete_mailbox, list_messages, get_message,
         wait_for_message, wait_for_code, send_message, search_messages, get_attachment]
