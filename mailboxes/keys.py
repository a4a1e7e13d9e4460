"""Who is calling: an account's API key or an anonymous mailbox's token, stored as SHA-256."""
import logging
import uuid
from dataclasses import dataclass

from accounts.errors import AccountSuspended, Forbidden
from accounts.models import Account, AccountStatus, Plan
from accounts.keys import api_key_for_hash, api_key_touch, hash_key, new_key
from mailboxes.models import Mailbox

logger = logging.getLogger(__name__)

MAILBOX_TOKEN_PREFIX = "rt_"


def new_mailbox_token() -> tuple[str, str]:
    """A fresh anonymous mailbox token and the hash to store for it."""
    return new_key(MAILBOX_TOKEN_PREFIX)


@dataclass(frozen=True)
class Caller:
    """Who asks. `owner` (an Account) for an API key; `mailbox_id` for an anonymous
    mailbox token, which authorizes that one mailbox and nothing else."""

    owner: Account | None = None
    mailbox_id: uuid.UUID | None = None
    api_key_id: int | None = None

    @property
    def is_anonymous(self) -> bool:
        return self.owner is None

    @property
    def plan(self) -> str:
        return self.owner.plan if self.owner else Plan.FREE


def caller_for_secret(key: str) -> Caller | None:
    """The caller a key or token belongs to, or None; a suspended account's key raises
    AccountSuspended (403: the key is right)."""
    digest = hash_key(key)
    if key.startswith(MAILBOX_TOKEN_PREFIX):
        mailbox_id = Mailbox.objects.visible().filter(token_hash=digest).values_list("id", flat=True).first()
        return Caller(mailbox_id=mailbox_id) if mailbox_id else None
    api_key = api_key_for_hash(digest)
    if api_key is None:
        return None
    account = api_key.account
    if account.status == AccountStatus.SUSPENDED:
        raise AccountSuspended("This account is suspended; its keys are refused until it is unsuspended.")
    if account.status != AccountStatus.ACTIVE:
        raise Forbidden("This account is not active.")
    api_key_touch(api_key=api_key)
    return Caller(owner=account, api_key_id=api_key.id)
