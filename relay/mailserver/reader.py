"""The JMAP reader: Email/changes from each mailbox's saved state, many accounts a request,
each new email stored once by its id (docs/architecture.md, "Mail read from the mail server").
Cyrus stamps whole seconds from a lagging clock: only mail stamped wholly before the end shows."""
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.core.cache import cache
from django.db import IntegrityError
from django.db.models import F

from mailboxes.messages import MailboxFull, recipient_by_id
from mailboxes.models import Mailbox, MailboxStatus, Message
from relay.backends import BackendError, TransientBackendError, mail_store
from relay.ingest import message_ingest
from relay.metrics import MAILSERVER_STORED

logger = logging.getLogger(__name__)

EMAIL_PROPERTIES = ["blobId", "receivedAt", "mailboxIds", "size"]
MAX_CHANGES = 256
# A mailbox read for the first time is listed this far; a disposable mailbox's first
# read comes moments after its account was made, when it holds nothing.
MAX_LISTED = 1000
# Rounds of Email/changes one read makes for a mailbox with more changes than one answer
# holds; what is left is the next read's.
MAX_ROUNDS = 8
# A search over all of a caller's mailboxes first reads this many of them, the newest.
READ_NOW_MAX = 200
# After the server failed a read that an API request asked for, such reads are skipped
# for this long: the API serves what is stored, and does not wait on a server that is down.
QUIET_SECONDS = 5.0
POLL_LOCK = "relay:mailserver:poll"
# The longest a poll lasts; a dead worker's lock lapses with it.
POLL_LOCK_SECONDS = 10
# One poll reads for this long at most, chunk by chunk, and leaves the rest (a backlog
# after an outage) to the next: what it read is saved as it goes.
POLL_BUDGET_SECONDS = 4.0
# The stamp's second, and the coarse clock's lag (a tick is 1 to 10 ms; one was seen late
# by up to 17 ms under load).
WHOLE_SECOND = timedelta(seconds=1, milliseconds=50)


@dataclass
class Reading:
    """One mailbox being read: where it was, where it got to, what to look at."""

    mailbox_id: uuid.UUID
    address: str
    account: str
    expires_at: datetime
    state: str
    stored_marker: str  # the server's marker of the account when it was last read
    marker: str | None = None  # saved with the new state; None leaves the stored one
    new_state: str = ""
    candidates: list[str] = field(default_factory=list)
    more: bool = False


_quiet_lock = threading.Lock()
_quiet_until = 0.0


def forget_failures() -> None:
    """Let the next read_now ask the server again at once (after a failure it waits
    QUIET_SECONDS)."""
    global _quiet_until
    with _quiet_lock:
        _quiet_until = 0.0


# --- the three ways in ---------------------------------------------------------------------------
def poll() -> int:
    """One round over every live mailbox; the messages stored. One poll at a time across
    all workers (a lock in the cache, which lapses if its holder dies)."""
    store = mail_store()
    if store is None or not cache.add(POLL_LOCK, uuid.uuid4().hex, POLL_LOCK_SECONDS):
        return 0
    try:
        markers = store.markers()
        readings = [reading for reading in _readings(store, Mailbox.objects.filter(status=MailboxStatus.ACTIVE),
                                                     markers)
                    if markers is None or not reading.state
                    or (reading.marker is not None and reading.marker != reading.stored_marker)]
        return _read(store, readings, until=time.monotonic() + POLL_BUDGET_SECONDS)
    finally:
        cache.delete(POLL_LOCK)


def read_now(mailboxes) -> None:
    """Read these mailboxes now, before an API read shows them. A failing server is logged
    and left alone for QUIET_SECONDS: the read answers from what is stored."""
    global _quiet_until
    store = mail_store()
    if store is None or time.monotonic() < _quiet_until:
        return
    rows = mailboxes.filter(status=MailboxStatus.ACTIVE).order_by("-created_at")[:READ_NOW_MAX]
    try:
        _read(store, _readings(store, rows, None))
    except BackendError as exc:
        with _quiet_lock:
            _quiet_until = time.monotonic() + QUIET_SECONDS
        logger.warning("could not read the mail server before answering (%s); answering from what is stored", exc)


def read_before_removal(mailbox_id) -> None:
    """The last read of an ended mailbox, before its account is deleted: mail delivered
    before the end that no poll read yet. Raises the backend's errors (the cleanup retries)."""
    store = mail_store()
    if store is None:
        return
    rows = Mailbox.objects.filter(id=mailbox_id, status__in=(MailboxStatus.ACTIVE, MailboxStatus.EXPIRED))
    _read(store, _readings(store, rows, None))


# --- reading ---------------------------------------------------------------------------------------
def _readings(store, rows, markers: dict | None) -> list[Reading]:
    fields = ("id", "address", "backend_id", "expires_at", "server_state", "server_marker")
    readings = []
    for mailbox_id, address, backend_id, expires_at, state, marker in rows.values_list(*fields):
        account = store.account_of(Mailbox(address=address, backend_id=backend_id))
        readings.append(Reading(mailbox_id, address, account, expires_at, state, marker,
                                marker=markers.get(account) if markers is not None else None))
    return readings


def _read(store, readings: list[Reading], until: float | None = None) -> int:
    """Read `readings`, a chunk of accounts to a request, until done (or `until`, a
    time.monotonic(), has passed: the rest is the next read's)."""
    stored, pending = 0, readings
    for _ in range(MAX_ROUNDS):
        if not pending:
            break
        per_request = max(1, store.jmap.max_calls() // 2)
        for start in range(0, len(pending), per_request):
            if until is not None and time.monotonic() > until:
                logger.info("the mail server's poll ran out of time; the next one goes on")
                return stored
            chunk = pending[start:start + per_request]
            _ask_changes(store, chunk)
            stored += _fetch_and_store(store, [reading for reading in chunk if reading.candidates])
            _save(chunk)
        pending = [reading for reading in pending if reading.more]
    return stored


def _ask_changes(store, chunk: list[Reading]) -> None:
    """Each mailbox's changes since its state (or, read for the first time, its state and
    every email it holds): sets new_state, candidates and more."""
    calls = []
    for i, reading in enumerate(chunk):
        reading.candidates, reading.more, reading.new_state = [], False, ""
        account = {"accountId": reading.account}
        if reading.state:
            calls.append(["Email/changes", {**account, "sinceState": reading.state, "maxChanges": MAX_CHANGES}, f"c{i}"])
        else:
            calls.append(["Email/get", {**account, "ids": [], "properties": ["id"]}, f"s{i}"])
            calls.append(["Email/query", {**account, "sort": [{"property": "receivedAt", "isAscending": True}],
                                          "limit": MAX_LISTED}, f"q{i}"])
    for name, answer, call_id in store.jmap.call(calls):
        reading = chunk[int(call_id[1:])]
        if name == "error":
            _method_error(reading, answer)
        elif name == "Email/changes":
            reading.new_state = str(answer.get("newState") or "")
            reading.candidates = [*(answer.get("created") or []), *(answer.get("updated") or [])]
            reading.more = bool(answer.get("hasMoreChanges"))
        elif name == "Email/get":
            reading.new_state = str(answer.get("state") or "")
        elif name == "Email/query":
            reading.candidates = list(answer.get("ids") or [])


def _method_error(reading: Reading, error: dict) -> None:
    kind = (error or {}).get("type")
    if kind == "cannotCalculateChanges":
        # The server forgot that state: list the mailbox whole (stored ones are skipped).
        reading.state, reading.more = "", True
        logger.info("the mail server cannot say what changed in %s since its state; reading it whole", reading.address)
    elif kind == "accountNotFound":
        logger.info("the mail server has no account for %s (removed, or not yet made)", reading.address)
    else:
        logger.warning("the mail server refused to read %s: %s", reading.address, error)


def _fetch_and_store(store, chunk: list[Reading]) -> int:
    """The candidates not stored yet: their properties, then each new email of the
    inbox that arrived before its mailbox's end, fetched whole and stored."""
    wanted = {}
    for reading in chunk:
        known = set(Message.objects.filter(mailbox_id=reading.mailbox_id, server_id__in=reading.candidates)
                    .values_list("server_id", flat=True))
        wanted[reading.mailbox_id] = [email_id for email_id in dict.fromkeys(reading.candidates) if email_id not in known]
    calls = []
    for i, reading in enumerate(chunk):
        if wanted[reading.mailbox_id]:
            calls.append(["Mailbox/query", {"accountId": reading.account, "filter": {"role": "inbox"}}, f"m{i}"])
            calls.append(["Email/get", {"accountId": reading.account, "ids": wanted[reading.mailbox_id],
                                        "properties": EMAIL_PROPERTIES}, f"g{i}"])
    if not calls:
        return 0
    emails: dict[int, list[dict]] = {}
    inboxes: dict[int, str] = {}
    for name, answer, call_id in store.jmap.call(calls):
        i = int(call_id[1:])
        if name == "Mailbox/query" and answer.get("ids"):
            inboxes[i] = answer["ids"][0]
        elif name == "Email/get":
            emails[i] = answer.get("list") or []
        elif name == "error":
            _method_error(chunk[i], answer)
    stored = 0
    for i, listed in emails.items():
        if listed and i not in inboxes:  # its state is not saved: the next read looks again
            raise TransientBackendError(f"the mail server named no inbox for {chunk[i].address}")
        for email in listed:
            stored += _store_one(store, chunk[i], email, inboxes[i])
    return stored


def _store_one(store, reading: Reading, email: dict, inbox: str) -> int:
    if not (email.get("mailboxIds") or {}).get(inbox):
        return 0  # not (or no longer) in the inbox
    received = _parse_time(email.get("receivedAt"))
    if received is None or received + WHOLE_SECOND > reading.expires_at:
        logger.info("mail for %s received at %s, after its end, is not shown", reading.address,
                    email.get("receivedAt"))
        return 0
    if not isinstance(email.get("size"), int) or email["size"] > settings.RELAY_MAX_MESSAGE_BYTES:
        logger.warning("mail %s for %s is over RELAY_MAX_MESSAGE_BYTES; not stored", email.get("id"), reading.address)
        return 0
    recipient = recipient_by_id(reading.mailbox_id)
    if recipient is None:
        return 0
    raw = store.jmap.download(reading.account, email["blobId"])
    try:
        stored = message_ingest(raw=raw, mail_from=_return_path(raw), recipients=[recipient], server_id=email["id"])
    except IntegrityError:
        return 0  # another reader stored it first
    except MailboxFull:
        logger.warning("mail %s for %s would pass the plan's storage quota; not stored", email["id"],
                       reading.address)
        return 0
    MAILSERVER_STORED.inc(len(stored))
    return len(stored)


def _save(chunk: list[Reading]) -> None:
    for reading in chunk:
        if reading.new_state:
            Mailbox.objects.filter(id=reading.mailbox_id).update(
                server_state=reading.new_state,
                server_marker=reading.marker if reading.marker is not None else F("server_marker"))
            reading.state = reading.new_state


def _parse_time(value) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def _return_path(raw: bytes) -> str:
    """The envelope sender, as the server recorded it in the Return-Path it prepends."""
    head = raw[:4096].split(b"\r\n\r\n", 1)[0]
    for line in head.splitlines():
        if line.lower().startswith(b"return-path:"):
            return line.split(b":", 1)[1].strip().strip(b"<>").decode("utf-8", "replace")[:320]
    return ""
