"""What can be done to a mailbox: reserve its address, record it, activate, renew and
label it (a message's changes are mailboxes.messages')."""
import json
import logging
import re
import secrets
import string
import uuid
from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction

from accounts.models import plan_limit
from domains.services import verified_domain
from mailboxes.ending import announce_ended
from mailboxes.errors import AddressTaken, DomainRefused, InvalidRequest, MailboxExpired, TtlOutOfRange
from mailboxes.keys import Caller, new_mailbox_token
from mailboxes.quotas import take_mailbox_slot
from mailboxes.mail_format import NOT_ONE_LINE, breaks_line
from mailboxes.models import AddressReservation, CleanupState, Mailbox, MailboxStatus, Plan, cleanup_owed
from owed import db_now

logger = logging.getLogger(__name__)

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
                   labels: dict | None = None, per_local_part: bool = False) -> tuple[Mailbox, str | None]:
    """The one way a mailbox row comes to be: the address reserved and the row written
    `provisioning` (leased) before the backend is asked, so it owns what the backend makes.
    Returns it and, for an anonymous caller, its token (shown once)."""
    owner = caller.owner if caller else None
    plan = caller.plan if caller else Plan.FREE
    ttl_ms = plan_ttl_ms(plan=plan, ttl_ms=ttl_ms)
    token, token_hash = new_mailbox_token() if owner is None else (None, None)
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
            **(labels or {}),
        )
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
