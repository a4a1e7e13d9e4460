"""What the MCP tools answer (docs/agents.md): each tool's result model, its outputSchema,
and the tool error, worded from the route's own error body in the tool's units."""
import json
import math
from typing import Any, Literal

from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel, ConfigDict, Field
from rest_framework import exceptions

from api.errors import error_of
from mailboxes.errors import RelayError, TtlOutOfRange

MINUTE_MS = 60_000


class Result(BaseModel):
    # What a later Relay adds to a result does not break a client that validates it.
    model_config = ConfigDict(extra="allow")


class MailboxOut(Result):
    id: str
    address: str
    status: str
    created_at: str
    expires_at: str
    expired_at: str | None = None
    message_count: int
    name: str
    tags: list[str]
    metadata: dict[str, Any]


class MailboxList(Result):
    mailboxes: list[MailboxOut]


class Deleted(Result):
    deleted: bool


class MessageSummary(Result):
    id: int
    mailbox_id: str
    from_: str | None = Field(alias="from")
    to: str | None
    subject: str | None
    received_at: str
    size: int
    is_read: bool
    has_attachments: bool
    authenticated: bool
    direction: str
    thread_id: int | None


class MessageList(Result):
    messages: list[MessageSummary]


class AttachmentOut(Result):
    id: int
    download_url: str
    filename: str | None
    content_type: str
    size: int


class Link(Result):
    url: str
    text: str | None


class MessageOut(MessageSummary):
    text: str | None
    html: str | None
    headers: list[list[str]]
    attachments: list[AttachmentOut]
    codes: list[str]
    links: list[Link]
    authentication: dict[str, Any]
    message_id: str | None
    in_reply_to: str | None
    references: list[str]
    cc: str
    reply_to: str
    outbox_id: int | None
    outbox_status: str | None


class Waited(Result):
    message: MessageOut | None


class CheckFailed(Result):
    error: str


class HtmlCheck(Result):
    data_date: str
    clients: list[dict[str, str]]
    score: dict[str, float | None] | None
    tested: dict[str, float | None] | None = None
    features: list[dict[str, Any]]


class LinkCheck(Result):
    status: Literal["pending", "done"]
    links: list[dict[str, Any]]


class SpamCheck(Result):
    score: float
    threshold: float
    is_spam: bool
    rules: list[dict[str, Any]]


class HeaderCheck(Result):
    checks: list[dict[str, Any]]


class Checks(Result):
    html: HtmlCheck | CheckFailed | None = None
    links: LinkCheck | CheckFailed | None = None
    spam: SpamCheck | CheckFailed | None = None
    headers: HeaderCheck | CheckFailed | None = None


class Code(Result):
    code: str | None
    codes: list[str] | None = None
    message_id: int | None = None
    from_: str | None = Field(default=None, alias="from")
    subject: str | None = None


class DomainRecord(Result):
    type: str
    name: str
    value: str
    status: str


class DomainOut(Result):
    id: str
    name: str
    status: str
    created_at: str
    verified_at: str | None = None
    records: list[DomainRecord]


class DomainList(Result):
    domains: list[DomainOut]


class Queued(Result):
    id: int
    status: str
    message_id: int


class ThreadOut(Result):
    id: int
    subject: str
    participants: list[str]
    message_count: int
    unread_count: int
    last_message_at: str


class ThreadList(Result):
    threads: list[ThreadOut]


class ThreadWhole(ThreadOut):
    messages: list[MessageSummary]


class Attachment(Result):
    filename: str | None
    content_type: str
    size: int
    text: str | None = None
    content_base64: str | None = None


def result(data: dict) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(data))], structured_content=data)


def failure(code: str, message: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=f"{code}: {message}")], is_error=True)


def _in_minutes(exc: TtlOutOfRange) -> str:
    low, cap = math.ceil(exc.low_ms / MINUTE_MS), exc.cap_ms // MINUTE_MS
    return f"ttl_minutes: must be between {low} and {cap} minutes on the {exc.plan} plan."


def failure_of(exc: RelayError | exceptions.APIException) -> CallToolResult:
    """The tool error for what the route would answer with an error: its code, and its
    message with each argument's reason."""
    if isinstance(exc, TtlOutOfRange):
        return failure("invalid_request", _in_minutes(exc))
    _, body = error_of(exc)
    reasons = [f"{name}: {' '.join(problems) if isinstance(problems, list) else problems}"
               for name, problems in (body.get("fields") or {}).items()]
    return failure(body["code"], " ".join(reasons) if reasons else body["message"])
