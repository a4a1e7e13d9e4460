"""Who is calling: an owner's API key, or the token of one anonymous mailbox. Only the
SHA-256 of either is stored: both are 256-bit random strings, so a fast hash is enough
and a lookup stays one indexed equality."""
import hashlib
import logging
import secrets
import uuid
from dataclasses import dataclass

from mailboxes.models import ApiKey, Mailbox, Owner, Plan

logger = logging.getLogger(__name__)

API_KEY_PREFIX = "rk_"
MAILBOX_TOKEN_PREFIX = "rt_"


def new_secret(prefix: str) -> tuple[str, str]:
    """A fresh key and the hash to store for it."""
    key = prefix + secrets.token_urlsafe(32)
    return key, hash_secret(key)


def hash_secret(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Caller:
    """Who asks. `owner` for an API key; `mailbox_id` for an anonymous mailbox token,
    which authorizes that one mailbox and nothing else."""

    owner: Owner | None = None
    mailbox_id: uuid.UUID | None = None

    @property
    def is_anonymous(self) -> bool:
        return self.owner is None

    @property
    def plan(self) -> str:
        return self.owner.plan if self.owner else Plan.FREE


def caller_for_secret(key: str) -> Caller | None:
    """The caller a presented key or token belongs to; None if it is unknown or revoked.
    A token of a mailbox that was deleted, or never finished provisioning, is dead."""
    digest = hash_secret(key)
    if key.startswith(MAILBOX_TOKEN_PREFIX):
        mailbox_id = Mailbox.objects.visible().filter(token_hash=digest).values_list("id", flat=True).first()
        return Caller(mailbox_id=mailbox_id) if mailbox_id else None
    api_key = ApiKey.objects.select_related("owner").filter(key_hash=digest, revoked_at=None).first()
    return Caller(owner=api_key.owner) if api_key else None


def owner_create_api_key(*, name: str, plan: str = Plan.FREE) -> tuple[Owner, str]:
    """Create the owner if needed (setting its plan) and a new key for it. Returns the
    key in clear text: the only time it exists outside the caller's hands."""
    owner, created = Owner.objects.get_or_create(name=name, defaults={"plan": plan})
    if not created and owner.plan != plan:
        owner.plan = plan
        owner.save(update_fields=["plan"])
    key, digest = new_secret(API_KEY_PREFIX)
    ApiKey.objects.create(owner=owner, prefix=key[:10], key_hash=digest)
    logger.info("created an API key for owner %s (plan %s)", owner.name, owner.plan)
    return owner, key
