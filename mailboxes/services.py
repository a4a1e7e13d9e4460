"""What can be done to a mailbox: create it, renew it. Ending one is expiry's business
(expiry/services.py)."""
import logging
import secrets
import string
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from mailboxes.authentication import MAILBOX_TOKEN_PREFIX, Principal, new_secret
from mailboxes.errors import BackendUnavailable, Conflict, Expired
from mailboxes.models import PLAN_TTL_CAP_MS, AddressReservation, ApiKey, Mailbox, MailboxStatus, Message, Owner, Plan
from relay.backends import BackendError, get_backend

logger = logging.getLogger(__name__)

RANDOM_LOCAL_PART_ALPHABET = string.ascii_lowercase + string.digits


def plan_ttl_cap_ms(plan: str) -> int:
    return min(PLAN_TTL_CAP_MS[Plan(plan)], settings.RELAY_MAX_TTL_MS)


def plan_default_ttl_ms(plan: str) -> int:
    return min(settings.RELAY_DEFAULT_TTL_MS, plan_ttl_cap_ms(plan))


def owner_create_api_key(*, name: str, plan: str = Plan.FREE) -> tuple[Owner, str]:
    """Create the owner if needed (setting its plan) and a new key for it. Returns the
    key in clear text: the only time it exists outside the caller's hands."""
    owner, created = Owner.objects.get_or_create(name=name, defaults={"plan": plan})
    if not created and owner.plan != plan:
        owner.plan = plan
        owner.save(update_fields=["plan"])
    key, digest = new_secret("rk_")
    ApiKey.objects.create(owner=owner, prefix=key[:10], key_hash=digest)
    logger.info("created an API key for owner %s (plan %s)", owner.name, owner.plan)
    return owner, key


def _reserve(address: str) -> bool:
    """Reserve an address for good; False if it was ever reserved before. The primary key
    settles concurrent creates: the second insert waits for the first and then fails."""
    try:
        with transaction.atomic():
            AddressReservation.objects.create(address=address)
    except IntegrityError:
        return False
    return True


def mailbox_create(*, principal: Principal | None, local_part: str | None, domain: str | None,
                   ttl_ms: int | None) -> tuple[Mailbox, str | None]:
    """Create a mailbox, provisioned on the mail backend. Returns it and, for an anonymous
    caller, the token that authorizes it (shown once). `ttl_ms` is already validated."""
    owner = principal.owner if principal else None
    plan = owner.plan if owner else Plan.FREE
    domain = domain or settings.RELAY_DOMAINS[0]
    ttl_ms = ttl_ms if ttl_ms is not None else plan_default_ttl_ms(plan)

    if local_part:
        address = f"{local_part}@{domain}"
        if not _reserve(address):
            raise Conflict(f"The address {address} has already been used.")
    else:
        for _ in range(8):
            address = "".join(secrets.choice(RANDOM_LOCAL_PART_ALPHABET) for _ in range(12)) + f"@{domain}"
            if _reserve(address):
                break
        else:
            raise Conflict("Could not find a free random address; try again.")

    token, token_hash = new_secret(MAILBOX_TOKEN_PREFIX) if owner is None else (None, None)
    now = timezone.now()
    mailbox = Mailbox(owner=owner, address=address, expires_at=now + timedelta(milliseconds=ttl_ms), token_hash=token_hash)

    # The backend call happens outside any transaction: only the reservation is
    # committed meanwhile, and it is released if provisioning fails.
    backend = get_backend()
    try:
        mailbox.backend_id = backend.provision(mailbox)
    except BackendError as exc:
        AddressReservation.objects.filter(address=address).delete()
        logger.warning("could not provision %s on %s: %s", address, backend.name, exc)
        raise BackendUnavailable() from exc
    try:
        mailbox.save(force_insert=True)
    except Exception:
        logger.exception("could not store %s after provisioning it; undoing", address)
        try:
            backend.deprovision(mailbox)
        finally:
            AddressReservation.objects.filter(address=address).delete()
        raise
    logger.info("created mailbox %s (%s) expiring at %s", mailbox.id, address, mailbox.expires_at.isoformat())
    return mailbox, token


def mailbox_renew(*, mailbox: Mailbox, ttl_ms: int) -> Mailbox:
    """Set `expires_at = now + ttl_ms` on an active mailbox. A mailbox that expired, even
    a moment ago, stays expired: 410."""
    now = timezone.now()
    expires_at = now + timedelta(milliseconds=ttl_ms)
    # Conditional on still being active and not yet due, so a renew can never revive a
    # mailbox that a sweep or an SMTP RCPT has just expired.
    renewed = Mailbox.objects.filter(id=mailbox.id, status=MailboxStatus.ACTIVE, expires_at__gt=now).update(
        expires_at=expires_at
    )
    if not renewed:
        raise Expired()
    mailbox.expires_at = expires_at
    return mailbox


def message_mark_read(*, message: Message) -> None:
    if not message.is_read:
        Message.objects.filter(id=message.id).update(is_read=True)
        message.is_read = True


def message_delete(*, mailbox: Mailbox, message_id: int) -> bool:
    """Delete one message of `mailbox` and keep its message_count in step."""
    with transaction.atomic():
        deleted, _ = Message.objects.filter(mailbox=mailbox, id=message_id).delete()
        if deleted:
            Mailbox.objects.filter(id=mailbox.id, message_count__gt=0).update(message_count=F("message_count") - 1)
    return bool(deleted)
