"""What Relay's API answers, as typed objects with the API's field names as attributes
(`from` is `from_`: a Python keyword), its timestamps as timezone-aware datetimes. Fields
the API adds later are kept in `.raw`, as the API sent them.

Generated from Relay's OpenAPI schema by scripts/python-types.sh: do not edit by hand."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, TypeVar

T = TypeVar("T")


def build(cls: type[T], data: dict[str, Any]) -> T:
    """An instance of the dataclass `cls` from the API's JSON `data`, with what nests in it."""
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    nested = getattr(cls, "NESTED", {})
    values = {}
    for key, value in data.items():
        name = "from_" if key == "from" else key
        if name in nested and isinstance(value, list):
            value = [build(globals()[nested[name]], item) for item in value]
        elif name in TIMESTAMPS:
            value = _timestamp(value)
        values[name] = value
    known = {key: value for key, value in values.items() if key in names and key != "raw"}
    return cls(**known, raw=data)  # type: ignore[call-arg]


def _timestamp(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else value


@dataclass(frozen=True, kw_only=True)
class ApiObject:
    """What every result keeps: the API's JSON as it came (`raw`)."""

    NESTED: ClassVar[dict[str, str]] = {}
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_api(cls: type[T], data: dict[str, Any]) -> T:
        return build(cls, data)


@dataclass(frozen=True)
class Event:
    """One event of a mailbox's stream: `message` (data: a list item, id: its id) or
    `expired` (data: the mailbox; the stream ends after it)."""

    event: str
    data: dict[str, Any]
    id: str | None = None



@dataclass(frozen=True, kw_only=True)
class Mailbox(ApiObject):
    id: str
    address: str
    status: str
    created_at: datetime
    expires_at: datetime
    expired_at: datetime | None
    message_count: int
    name: str
    tags: list[str]
    metadata: dict[str, Any]
    sandbox: bool
    token: str | None = None
    smtp: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class Attachment(ApiObject):
    id: int
    download_url: str
    filename: str | None
    content_type: str
    size: int
    content_id: str | None


@dataclass(frozen=True, kw_only=True)
class Link(ApiObject):
    url: str
    text: str


@dataclass(frozen=True, kw_only=True)
class Delivery(ApiObject):
    """One recipient of a sent message, and what became of it."""

    recipient: str
    status: str
    smtp_code: int | None
    detail: str
    at: datetime


@dataclass(frozen=True, kw_only=True)
class Message(ApiObject):
    """A list item, or (from get_message and the waits) a message whole: then the fields of a
    message whole are filled in."""

    NESTED: ClassVar[dict[str, str]] = {"attachments": "Attachment", "links": "Link", "delivery": "Delivery"}
    id: int
    mailbox_id: str
    from_: str
    to: str
    envelope_from: str
    envelope_to: str
    rcpt_to: list[str]
    subject: str
    received_at: datetime
    size: int
    is_read: bool
    has_attachments: bool
    authenticated: bool
    direction: str
    thread_id: int | None
    text: str | None = None
    html: str | None = None
    headers: list[list[str]] = field(default_factory=list)
    attachments: list[Attachment] = field(default_factory=list)
    codes: list[str] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    authentication: dict[str, Any] | None = None
    message_id: str | None = None
    header_message_id: str | None = None
    in_reply_to: str | None = None
    references: list[str] = field(default_factory=list)
    cc: str | None = None
    reply_to: str | None = None
    outbox_id: int | None = None
    outbox_status: str | None = None
    delivery: list[Delivery] = field(default_factory=list)
    envelope: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class DomainRecord(ApiObject):
    type: str
    name: str
    value: str
    status: str


@dataclass(frozen=True, kw_only=True)
class Domain(ApiObject):
    NESTED: ClassVar[dict[str, str]] = {"records": "DomainRecord"}
    id: str
    name: str
    status: str
    created_at: datetime
    verified_at: datetime | None
    records: list[DomainRecord]


@dataclass(frozen=True, kw_only=True)
class Sent(ApiObject):
    """A mail queued: `id` its outbox entry, `message_id` the copy kept in the mailbox."""

    id: int
    status: str
    message_id: int


@dataclass(frozen=True, kw_only=True)
class Thread(ApiObject):
    """A conversation; `messages` (oldest first) only from get_thread."""

    NESTED: ClassVar[dict[str, str]] = {"messages": "Message"}
    id: int
    subject: str
    participants: list[str]
    message_count: int
    unread_count: int
    last_message_at: datetime
    messages: list[Message] = field(default_factory=list)


TIMESTAMPS = frozenset({'at', 'created_at', 'expired_at', 'expires_at', 'last_message_at', 'received_at', 'verified_at'})
