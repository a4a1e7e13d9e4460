"""What Relay's API answers, as typed objects with the API's field names as attributes
(`from` is `from_`: a Python keyword), its timestamps as timezone-aware datetimes. Fields
the API adds later are kept in `.raw`, as the API sent them."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

T = TypeVar("T")


def build(cls: type[T], data: dict[str, Any]) -> T:
    """An instance of the dataclass `cls` from the API's JSON `data`."""
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values = {("from_" if key == "from" else key): _timestamp(value) if key in TIMESTAMPS else value
              for key, value in data.items()}
    known = {key: value for key, value in values.items() if key in names and key != "raw"}
    return cls(**known, raw=data)  # type: ignore[call-arg]


TIMESTAMPS = frozenset({"created_at", "expires_at", "expired_at", "received_at", "verified_at", "last_message_at"})


def _timestamp(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else value


@dataclass(frozen=True, kw_only=True)
class ApiObject:
    """What every result keeps: the API's JSON as it came (`raw`)."""

    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True, kw_only=True)
class Mailbox(ApiObject):
    id: str
    address: str
    status: str
    created_at: datetime
    expires_at: datetime
    expired_at: datetime | None = None
    message_count: int = 0
    name: str = ""
    tags: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    token: str | None = None  # only when created anonymously


@dataclass(frozen=True, kw_only=True)
class Attachment(ApiObject):
    id: int
    download_url: str
    filename: str | None
    content_type: str
    size: int
    content_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class Link(ApiObject):
    url: str
    text: str


@dataclass(frozen=True, kw_only=True)
class Message(ApiObject):
    """A list item, or (from get_message and the waits) a message whole: then `text`,
    `html`, `headers`, `attachments`, `codes` and `links` are filled in."""

    id: int
    mailbox_id: str
    from_: str
    to: str
    subject: str
    received_at: datetime
    envelope_from: str = ""
    envelope_to: str = ""
    size: int = 0
    is_read: bool = False
    has_attachments: bool = False
    authenticated: bool = False
    authentication: dict[str, Any] | None = None  # the verdict's parts, on a message whole
    text: str | None = None
    html: str | None = None
    headers: list[list[str]] = field(default_factory=list)
    attachments: list[Attachment] = field(default_factory=list)
    codes: list[str] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    direction: str = "in"  # "out": sent from the mailbox
    thread_id: int | None = None
    # On a message whole: its place in the conversation, and a sent one's outbox status.
    message_id: str | None = None
    in_reply_to: str | None = None
    references: list[str] = field(default_factory=list)
    cc: str = ""
    reply_to: str = ""
    outbox_id: int | None = None
    outbox_status: str | None = None

    @classmethod
    def from_api(cls, data: dict[str, Any]) -> Message:
        message = build(cls, data)
        return dataclasses.replace(
            message, attachments=[build(Attachment, item) for item in data.get("attachments", [])],
            links=[build(Link, item) for item in data.get("links", [])])


@dataclass(frozen=True, kw_only=True)
class DomainRecord(ApiObject):
    type: str
    name: str
    value: str
    status: str


@dataclass(frozen=True, kw_only=True)
class Domain(ApiObject):
    id: str
    name: str
    status: str
    created_at: datetime
    verified_at: datetime | None = None
    records: list[DomainRecord] = field(default_factory=list)

    @classmethod
    def from_api(cls, data: dict[str, Any]) -> Domain:
        return dataclasses.replace(build(cls, data), records=[build(DomainRecord, item)
                                                              for item in data.get("records", [])])


@dataclass(frozen=True, kw_only=True)
class Sent(ApiObject):
    """A mail queued: `id` its outbox entry, `message_id` the copy kept in the mailbox."""

    id: int
    status: str
    message_id: int | None = None


@dataclass(frozen=True, kw_only=True)
class Thread(ApiObject):
    """A conversation; `messages` (oldest first) only from get_thread."""

    id: int
    subject: str
    participants: list[str]
    message_count: int
    unread_count: int
    last_message_at: datetime
    messages: list[Message] = field(default_factory=list)

    @classmethod
    def from_api(cls, data: dict[str, Any]) -> Thread:
        return dataclasses.replace(build(cls, data), messages=[Message.from_api(item)
                                                               for item in data.get("messages", [])])


@dataclass(frozen=True)
class Event:
    """One event of a mailbox's stream: `message` (data: a list item, id: its id) or
    `expired` (data: the mailbox; the stream ends after it)."""

    event: str
    data: dict[str, Any]
    id: str | None = None
