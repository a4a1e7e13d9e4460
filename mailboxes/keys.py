"""Who is calling: an account's API key, an anonymous mailbox's token (both stored as SHA-256),
or an OAuth access token an account granted an agent."""
import logging
import uuid
from dataclasses import dataclass

from accounts.credentials import API_KEY_PREFIX, api_key_for_hash, api_key_touch, hash_key, new_key
from accounts.errors import AccountSuspended, Forbidden
from accounts.models import Account, AccountStatus, Plan
from accounts.oauth import token_grant
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
    # What an OAuth access token was granted (docs/agents.md, "Scopes"); None: everything
    # the owner may do (an API key, a mailbox token).
    scopes: frozenset[str] | None = None

    def may(self, scope: str | None) -> bool:
        """Whether this caller's grant covers `scope` (None: a route no token may use)."""
        return self.scopes is None or (scope is not None and scope in self.scopes)

    @property
    def is_anonymous(self) -> bool:
        return self.owner is None

    @property
    def plan(self) -> str:
        return self.owner.plan if self.owner else Plan.FREE


def caller_for_secret(key: str, *, audience: str | None = None) -> Caller | None:
    """The caller a key or token belongs to, or None; a suspended account's key raises
    AccountSuspended (403: the key is right). `audience`: where the secret was presented
    (RELAY_API_RESOURCE or RELAY_MCP_RESOURCE), which an OAuth access token must be bound to."""
    if audience is not None and not key.startswith((MAILBOX_TOKEN_PREFIX, API_KEY_PREFIX)):
        grant = token_grant(key, audience)
        if grant is None:
            return None
        account, scopes = grant
        if account.status == AccountStatus.SUSPENDED:
            raise AccountSuspended("This account is suspended; its keys are refused until it is unsuspended.")
        if account.status != AccountStatus.ACTIVE:
            raise Forbidden("This account is not active.")
        return Caller(owner=account, scopes=scopes)
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
