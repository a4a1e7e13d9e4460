"""A mailbox's life, every write to it: its address reserved and the row recorded before
the backend is asked (crash-safe creation), activated, renewed, labelled, and ended
(expired when due, deleted, "expire now", a provisioning that never finished), each end
owing its cleanup, told to webhooks/ and expiry/ by signals; and the plan's slot it holds
while it lives."""
import json
import logging
import re
import secrets
import string
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.db.models.functions import Greatest

from accounts.identity import Caller, new_mailbox_token, new_smtp_password
from accounts.models import Account, plan_limit
from domains.services import verified_domain
from mailboxes import wakeups
from mailboxes.errors import (AccountNotRelays, AddressTaken, BackendFailure, BackendUnavailable, DomainRefused,
                              InvalidRequest, MailboxExpired, QuotaExceeded, TtlOutOfRange)
from mailboxes.mail_format import NOT_ONE_LINE, breaks_line
from mailboxes.models import AddressReservation, CleanupState, Mailbox, MailboxStatus, Message, Plan, cleanup_owed
from mailboxes.signals import event_happened, mailboxes_ended
from core.clock import db_now
from owed import ERROR_MAX_CHARS

logger = logging.getLogger(__name__)


# --- the plan's slots -------------------------------------------------------------------------
# A slot is counted on the owner's row (the plan's active_mailboxes, accounts.models.plan_limit).
def take_mailbox_slot(owner: Account) -> None:
    """Count one more live mailbox for `owner` or raise QuotaExceeded, inside the creating
    transaction: the conditional UPDATE is the check."""
    limit = plan_limit(owner.plan, "active_mailboxes")
    if Account.objects.filter(id=owner.id, live_mailboxes__lt=limit).update(live_mailboxes=F("live_mailboxes") + 1):
        return
    live = Mailbox.objects.live().filter(owner=owner)
    soonest = live.order_by("expires_at").values_list("expires_at", flat=True).first()
    wait = (soonest - db_now()).total_seconds() if soonest else 60
    raise QuotaExceeded(f"The {owner.plan} plan allows {limit} active mailboxes; delete one or wait for one "
                        "to expire.", retry_after=wait)


def give_back_mailbox_slots(mailbox_ids: list) -> None:
    """The mailboxes `mailbox_ids` just stopped being live (expired, deleted, or never
    provisioned): give their owners' slots back. Call in the transaction that ended them."""
    owners = Counter(Mailbox.objects.filter(id__in=mailbox_ids, owner__isnull=False)
                     .values_list("owner_id", flat=True))
    for owner_id, ended in owners.items():
        Account.objects.filter(id=owner_id).update(live_mailboxes=Greatest(F("live_mailboxes") - ended, 0))


# --- recording and changing a mailbox ---------------------------------------------------------
RANDOM_LOCAL_PART_ALPHABET = string.ascii_lowercase + string.digits
# Random addresses are 12 of 36 characters; a clash is a freak, eight in a row is a bug.
RANDOM_ADDRESS_TRIES = 8


def plan_ttl_ms(*, plan: str, ttl_ms: int | None) -> int:
    """The TTL to use: `ttl_ms` if the plan allows it, the plan's default when absent."""
    cap = plan_limit(plan, "ttl_cap_ms")
    if ttl_ms is None:
        return min(settings.RELAY_DEFAULT_TTL_MS, cap)
    if not settings.RELAY_MIN_TTL_MS <= ttl_ms <= cap:
        raise TtlOutOfRange(low_ms=settings.RELAY_MIN_TTL_MS, cap_ms=cap, plan=plan)
    return ttl_ms


def _reserve(address: str) -> bool:
    """Reserve an address for good; False if it ever was. One statement: the primary key
    settles concurrent creates."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {AddressReservation._meta.db_table} (address, reserved_at) VALUES (%s, %s)"
            " ON CONFLICT DO NOTHING RETURNING address",
            [address, AddressReservation._meta.get_field("reserved_at").get_db_prep_value(db_now(), connection)])
        return cursor.fetchone() is not None


def _reserve_address(*, local_part: str | None, domain: str, per_local_part: bool) -> str:
    """Reserve the address (random when `local_part` is None); `per_local_part` (Cyrus,
    whose accounts are the local part alone) reserves `local@` too."""
    if local_part:
        address = f"{local_part}@{domain}"
        if not _reserve(address):
            raise AddressTaken(f"The address {address} has already been used.")
        if per_local_part and not _reserve(f"{local_part}@"):
            raise AddressTaken(f"The local part {local_part} has already been used, in this or another domain.")
        return address
    for _ in range(RANDOM_ADDRESS_TRIES):
        local_part = "".join(secrets.choice(RANDOM_LOCAL_PART_ALPHABET) for _ in range(12))
        if _reserve(f"{local_part}@{domain}") and (not per_local_part or _reserve(f"{local_part}@")):
            return f"{local_part}@{domain}"
    raise AddressTaken("Could not find a free random address; try again.")


def mailbox_insert(*, caller: Caller | None, local_part: str | None, domain: str | None,
                   ttl_ms: int | None, lease_seconds: float, active: bool = False,
                   labels: dict | None = None, per_local_part: bool = False,
                   sandbox: bool = False) -> tuple[Mailbox, str | None]:
    """The one way a mailbox row comes to be: the address reserved and the row written
    `provisioning` (leased) before the backend is asked, so it owns what the backend makes.
    Returns it and, for an anonymous caller, its token (shown once). A `sandbox` comes with
    its SMTP password in `smtp_password`, on this instance only (shown once)."""
    owner = caller.owner if caller else None
    plan = caller.plan if caller else Plan.FREE
    ttl_ms = plan_ttl_ms(plan=plan, ttl_ms=ttl_ms)
    token, token_hash = new_mailbox_token() if owner is None else (None, None)
    smtp_password, smtp_password_hash = new_smtp_password() if sandbox else (None, None)
    # One transaction: the quota count, the reservation and the row stand or fall together.
    with transaction.atomic():
        if owner is not None:
            take_mailbox_slot(owner)
        if domain and domain not in settings.RELAY_DOMAINS and not verified_domain(owner=owner, name=domain, lock=True):
            # Checked again under the domain's row lock: a delete of it waits for this
            # mailbox, and then sees it (mailboxes.domain_removal.domain_delete).
            raise DomainRefused()
        address = _reserve_address(local_part=local_part, domain=domain or settings.RELAY_DOMAINS[0],
                                   per_local_part=per_local_part)
        now = db_now()
        mailbox = Mailbox.objects.create(
            owner=owner, address=address, token_hash=token_hash, expires_at=now + timedelta(milliseconds=ttl_ms),
            status=MailboxStatus.ACTIVE if active else MailboxStatus.PROVISIONING,
            provision_lease_until=None if active else now + timedelta(seconds=lease_seconds),
            sandbox=sandbox, smtp_password_hash=smtp_password_hash, **(labels or {}),
        )
    mailbox.smtp_password = smtp_password
    if active:
        logger.info("created mailbox %s (%s) expiring at %s", mailbox.id, address, mailbox.expires_at.isoformat())
    return mailbox, token


def mailbox_activate(*, mailbox: Mailbox, backend_id: str) -> bool:
    """The backend made the mailbox: hand it out. False if a sweep gave up on it first; its
    cleanup is then owed again, since the backend's account may postdate the one that ran."""
    activated = Mailbox.objects.filter(id=mailbox.id, status=MailboxStatus.PROVISIONING).update(
        status=MailboxStatus.ACTIVE, backend_id=backend_id, provision_lease_until=None)
    if activated:
        mailbox.status, mailbox.backend_id, mailbox.provision_lease_until = MailboxStatus.ACTIVE, backend_id, None
        logger.info("created mailbox %s (%s) expiring at %s", mailbox.id, mailbox.address, mailbox.expires_at.isoformat())
        return True
    with transaction.atomic():
        reopened = Mailbox.objects.filter(
            id=mailbox.id, cleanup_state__in=(CleanupState.DONE, CleanupState.DEAD)).update(
            backend_id=backend_id, **cleanup_owed(now=db_now(), claim=uuid.uuid4()))
        if reopened:
            announce_ended([mailbox.id])
    logger.warning("mailbox %s was provisioned after its lease lapsed; its deprovision is owed", mailbox.address)
    return False


def mailbox_renew(*, mailbox: Mailbox, plan: str, ttl_ms: int | None) -> Mailbox:
    """Set `expires_at = now + ttl_ms` (the plan's default when absent) on an active
    mailbox. A mailbox that expired, even a moment ago, stays expired."""
    ttl_ms = plan_ttl_ms(plan=plan, ttl_ms=ttl_ms)
    now = db_now()
    expires_at = now + timedelta(milliseconds=ttl_ms)
    # Conditional on still being active and not yet due, so a renew can never revive a
    # mailbox that a sweep or an SMTP RCPT has just expired.
    renewed = Mailbox.objects.receiving(now).filter(id=mailbox.id).update(expires_at=expires_at)
    if not renewed:
        raise MailboxExpired()
    mailbox.expires_at = expires_at
    return mailbox


# The fields a PATCH may change (docs/api.md), and what each takes.
LABEL_FIELDS = ("name", "tags", "metadata")
NAME_MAX = 100
TAGS_MAX = 10
TAG_PATTERN = r"^[a-z0-9_-]{1,32}$"
_TAG = re.compile(TAG_PATTERN)
METADATA_MAX_BYTES = 4096


def labels_checked(labels: dict) -> dict:
    """Labels as every door takes them (a name of one line, at most NAME_MAX characters,
    empty for none; at most TAGS_MAX tags as sent, a repeat kept once; metadata a JSON
    object kept as its compact text, at most METADATA_MAX_BYTES), or InvalidRequest
    naming the field."""
    return {field: _LABEL_RULES[field](labels[field]) for field in LABEL_FIELDS if field in labels}


def label_rule(name: str) -> Callable:
    """The rule for one label, as a route's field calls it."""
    return _LABEL_RULES[name]


def _name(value: str) -> str:
    if not isinstance(value, str):
        raise InvalidRequest("must be a string.", field="name")
    if breaks_line(value):
        raise InvalidRequest(NOT_ONE_LINE, field="name")
    if len(value) > NAME_MAX:
        raise InvalidRequest(f"takes at most {NAME_MAX} characters.", field="name")
    return value


def tag_checked(value: str) -> str:
    """One tag (a label, or a list's filter): 1 to 32 of a-z, 0-9, '_' and '-'."""
    if not isinstance(value, str) or not _TAG.fullmatch(value):
        raise InvalidRequest("a tag is 1 to 32 of a-z, 0-9, '_' and '-'.", field="tags")
    return value


def _tags(values: list) -> list[str]:
    if len(values) > TAGS_MAX:
        raise InvalidRequest(f"takes at most {TAGS_MAX} tags.", field="tags")
    for index, value in enumerate(values):
        try:
            tag_checked(value)
        except InvalidRequest as exc:
            raise InvalidRequest(f"item {index}: {exc.message}", field="tags") from exc
    return list(dict.fromkeys(values))


def _metadata(value: dict) -> str:
    if not isinstance(value, dict):
        raise InvalidRequest("metadata must be a JSON object.", field="metadata")
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    size = len(text.encode())
    if size > METADATA_MAX_BYTES:
        raise InvalidRequest(f"metadata must be at most {METADATA_MAX_BYTES} bytes as JSON; this is {size}.",
                             field="metadata")
    return text


_LABEL_RULES = {"name": _name, "tags": _tags, "metadata": _metadata}


def mailbox_label(*, mailbox: Mailbox, labels: dict) -> Mailbox:
    """Set the given name, tags or metadata, each replaced whole and only those written (two
    PATCHes of different fields both stand). MailboxExpired if it ended meanwhile."""
    changes = {field: labels[field] for field in LABEL_FIELDS if field in labels}
    if changes and not Mailbox.objects.filter(id=mailbox.id, status=MailboxStatus.ACTIVE).update(**changes):
        raise MailboxExpired()
    for field, value in changes.items():
        setattr(mailbox, field, value)
    return mailbox


# --- creating one, crash-safe -----------------------------------------------------------------
# The row is written `provisioning` before the backend is asked: no backend account exists
# without a row that owns it.
def provision_lease_seconds(backend) -> float:
    """How long a creator is trusted: the cleanup lease plus the longest a provision call
    can take, so the lease never lapses while the backend may still be creating."""
    return settings.RELAY_CLEANUP_LEASE_SECONDS + backend.provision_seconds_max


# A local part Relay hands out: a dot-atom of a-z, 0-9, '_' and '-' (no leading, trailing
# or doubled dot), at most 64 characters. The API's schema says the same, in any case.
LOCAL_PART_PATTERN = r"[a-z0-9_-]+(\.[a-z0-9_-]+)*"
_LOCAL_PART = re.compile(LOCAL_PART_PATTERN)


def local_part_checked(value: str) -> str:
    """A local part as every door takes it, lowercased: a dot-atom of 1 to 64 characters."""
    value = value.lower()
    if len(value) > 64 or not _LOCAL_PART.fullmatch(value):
        raise InvalidRequest("local_part must be 1 to 64 of a-z, 0-9, '.', '_' and '-', with no leading, trailing or "
                             "double dot.", field="local_part")
    return value


def address_allowed(*, backend, local_part: str | None, domain: str | None,
                    owner=None) -> tuple[str | None, str | None]:
    """The address rules for every door: a dot-atom local part not reserved, a domain of
    RELAY_DOMAINS or the owner's verified ones. Both lowercased; InvalidRequest naming the field."""
    local_part = None if local_part is None else local_part_checked(local_part)
    domain = None if domain is None else domain.lower()
    if domain is not None and domain not in settings.RELAY_DOMAINS and not verified_domain(owner=owner, name=domain):
        raise DomainRefused()
    if local_part is not None and (local_part in settings.RELAY_RESERVED_LOCAL_PARTS
                                   or local_part in backend.reserved_names()):
        raise InvalidRequest(f"{local_part} is a reserved address and cannot be handed out.", field="local_part")
    return local_part, domain


def mailbox_create(*, backend, caller: Caller | None, local_part: str | None, domain: str | None,
                   ttl_ms: int | None, labels: dict | None = None, sandbox: bool = False) -> tuple[Mailbox, str | None]:
    """Create a mailbox provisioned on `backend` (handed in: backends sit above). Returns it
    and an anonymous caller's token; AddressTaken, InvalidRequest or BackendUnavailable.
    A `sandbox` also catches what its SMTP login submits (mailbox_insert)."""
    local_part, domain = address_allowed(backend=backend, local_part=local_part, domain=domain,
                                         owner=caller.owner if caller else None)
    if not backend.keeps_accounts:
        # Nothing outside Relay to create, so nothing a crash could orphan: the row is
        # the whole mailbox, written active in one transaction.
        return mailbox_insert(caller=caller, local_part=local_part, domain=domain, ttl_ms=ttl_ms,
                              lease_seconds=0, active=True, labels=labels, sandbox=sandbox)
    mailbox, token = mailbox_insert(caller=caller, local_part=local_part, domain=domain, ttl_ms=ttl_ms,
                                    lease_seconds=provision_lease_seconds(backend), labels=labels,
                                    per_local_part=backend.one_account_per_local_part, sandbox=sandbox)
    # No transaction is open here: the intent is committed before the network call.
    started = db_now()
    # However the call ends, the backend may go on creating for as long as a provision
    # call may last; the undo waits that long.
    settled_by = started + timedelta(seconds=backend.provision_seconds_max)
    try:
        backend_id = backend.provision(mailbox)
    except AccountNotRelays as exc:
        # Someone else's account: nothing of Relay's to undo, and nothing to remove.
        provisioning_refused(mailbox_id=mailbox.id, reason=str(exc))
        raise AddressTaken(f"The address {mailbox.address} is taken on the mail server.") from exc
    except BackendFailure as exc:
        provisionings_abandon(mailbox_ids=[mailbox.id], reason=str(exc), not_before=settled_by)
        raise BackendUnavailable() from exc
    except Exception as exc:
        # A bug: whatever the backend did meanwhile, the row still owes an undo.
        provisionings_abandon(mailbox_ids=[mailbox.id], reason=f"{type(exc).__name__}: {exc}", not_before=settled_by)
        raise
    if not mailbox_activate(mailbox=mailbox, backend_id=backend_id):
        raise BackendUnavailable("Provisioning the mailbox took too long; try again.")
    return mailbox, token


def smtp_settings(*, mailbox: Mailbox, password: str) -> dict:
    """What an app is configured with to submit to a sandbox (docs/sandbox.md), every door's.
    `security` is "none" where this Relay has no certificate (make run): it offers no
    STARTTLS then, and AUTH goes without it from the same host only."""
    return {"host": settings.RELAY_SMTP_PUBLIC_HOST, "port": settings.RELAY_SUBMISSION_PORT or None,
            "username": mailbox.address, "password": password,
            "security": "starttls" if settings.RELAY_SMTP_TLS_CERT else "none"}


def sandbox_password_rotate(*, mailbox: Mailbox) -> str:
    """A new SMTP password for an active sandbox (returned, shown once); the old one fails
    at the next AUTH in every SMTP process, which looks it up each time. InvalidRequest for
    a mailbox that is not a sandbox, MailboxExpired for one that ended."""
    if not mailbox.sandbox:
        raise InvalidRequest("This mailbox is not a sandbox; create one with \"sandbox\": true.")
    password, digest = new_smtp_password()
    if not Mailbox.objects.filter(id=mailbox.id, sandbox=True, status=MailboxStatus.ACTIVE).update(
            smtp_password_hash=digest):
        raise MailboxExpired()
    mailbox.smtp_password_hash = digest
    return password


# --- how a mailbox ends -----------------------------------------------------------------------
def announce_ended(mailbox_ids: list, *, not_before: datetime | None = None) -> None:
    """Say that these mailboxes ended and owe their cleanup: expiry/ queues it."""
    if mailbox_ids:
        mailboxes_ended.send(sender=Mailbox, mailbox_ids=list(mailbox_ids), not_before=not_before)


def mailboxes_expire_due(*, mailbox_ids: list, now: datetime | None = None, announce: bool = True) -> list:
    """Expire those of `mailbox_ids` that are due and owe their cleanup (`announce`: queued
    and waiters woken after commit). Returns the ids this call expired."""
    if not mailbox_ids:
        return []
    now = now or db_now()
    claim = uuid.uuid4()
    with transaction.atomic():
        # "Due" is part of the WHERE, which makes this a compare-and-set: of two callers
        # racing for one mailbox, only one moves it.
        moved = Mailbox.objects.due(now).filter(id__in=mailbox_ids).update(
            status=MailboxStatus.EXPIRED, expired_at=now, **cleanup_owed(now=now, claim=claim))
        if moved == len(mailbox_ids):
            expired = list(mailbox_ids)
        elif moved:
            # Someone else moved some of them first; the claim tells ours apart.
            expired = list(Mailbox.objects.filter(id__in=mailbox_ids, cleanup_claim=claim).values_list("id", flat=True))
        else:
            return []
        give_back_mailbox_slots(expired)
        event_happened.send(sender=Mailbox, event="mailbox.expired", mailbox_ids=expired)
        if announce:
            announce_ended(expired)
            # A cleanup task that expires its own mailbox (announce=False) runs the cleanup
            # itself and wakes no one: a waiter wakes itself at its mailbox's expires_at.
            wakeups.publish_on_commit(expired, "ended")
    logger.info("expired %d mailbox(es)", len(expired))
    return expired


def mailbox_delete(*, mailbox: Mailbox, now: datetime | None = None) -> None:
    """Soft-delete: the mailbox stops receiving at once, is deprovisioned like an expired
    one, and is invisible from then on."""
    now = now or db_now()
    with transaction.atomic():
        owes_cleanup = Mailbox.objects.filter(id=mailbox.id, status=MailboxStatus.ACTIVE).update(
            status=MailboxStatus.DELETED, deleted_at=now, **cleanup_owed(now=now, claim=uuid.uuid4()))
        if owes_cleanup:
            give_back_mailbox_slots([mailbox.id])
            announce_ended([mailbox.id])
        else:
            # Expired already: its cleanup is under way or finished; leave that as it is.
            owes_cleanup = Mailbox.objects.filter(id=mailbox.id, status=MailboxStatus.EXPIRED).update(
                status=MailboxStatus.DELETED, deleted_at=now)
        if owes_cleanup:
            # Its mail leaves the owner's searches; storing holds this row's lock to commit.
            Message.objects.filter(mailbox_id=mailbox.id).update(owner=None)
            event_happened.send(sender=Mailbox, event="mailbox.deleted", mailbox_ids=[mailbox.id])
            wakeups.publish_on_commit([mailbox.id], "ended")
    logger.info("deleted mailbox %s (%s)", mailbox.id, mailbox.address)


def mailboxes_force_expire(*, mailbox_ids: list) -> list:
    """The operator's "expire now": end these active mailboxes at once, due or not."""
    now = db_now()
    Mailbox.objects.receiving(now).filter(id__in=mailbox_ids).update(expires_at=now)
    return mailboxes_expire_due(mailbox_ids=mailbox_ids, now=now)


def provisioning_refused(*, mailbox_id, reason: str, now: datetime | None = None) -> None:
    """A provisioning refused because someone else's account was there: deleted, owing nothing."""
    now = now or db_now()
    with transaction.atomic():
        refused = Mailbox.objects.filter(id=mailbox_id, status=MailboxStatus.PROVISIONING).update(
            status=MailboxStatus.DELETED, deleted_at=now, provision_lease_until=None,
            cleanup_state=CleanupState.DONE, cleanup_done_at=now, cleanup_last_error=reason[:ERROR_MAX_CHARS])
        if refused:
            give_back_mailbox_slots([mailbox_id])
    logger.warning("refused mailbox %s: %s", mailbox_id, reason)


def provisionings_abandon(*, mailbox_ids: list, now: datetime | None = None, reason: str,
                          not_before: datetime | None = None) -> list:
    """Give up on mailboxes still `provisioning` (the backend failed, or their creator died):
    deleted, owing a deprovision from `not_before`, in case the backend made the account late."""
    if not mailbox_ids:
        return []
    now = now or db_now()
    claim = uuid.uuid4()
    with transaction.atomic():
        Mailbox.objects.filter(id__in=mailbox_ids, status=MailboxStatus.PROVISIONING).update(
            status=MailboxStatus.DELETED, deleted_at=now, provision_lease_until=None,
            **cleanup_owed(now=now, claim=claim, not_before=not_before))
        abandoned = list(Mailbox.objects.filter(id__in=mailbox_ids, cleanup_claim=claim).values_list("id", flat=True))
        give_back_mailbox_slots(abandoned)
        announce_ended(abandoned, not_before=not_before)
    if abandoned:
        logger.warning("gave up provisioning %d mailbox(es) (%s); their deprovision is queued", len(abandoned), reason)
    return abandoned
