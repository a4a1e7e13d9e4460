"""API keys, made and revoked; a revocation (of a key, or of every credential of an account
that changes status) reaches every web process on its next request (accounts.identity's
revocation counter)."""
import logging

from django.conf import settings
from django.db import transaction
from django.db.models.functions import Now

from accounts import identity
from accounts.errors import NotFound, QuotaExceeded
from accounts.models import Account, ApiKey

logger = logging.getLogger(__name__)


def api_key_create(*, account: Account) -> tuple[ApiKey, str]:
    """A new key for `account`, in clear text this once; at most RELAY_MAX_API_KEYS live."""
    key, digest = identity.new_secret(identity.API_KEY_PREFIX)
    with transaction.atomic():
        # The account's row lock orders concurrent creations: each counts the others'.
        list(Account.objects.select_for_update().filter(id=account.id).values_list("id", flat=True))
        if ApiKey.objects.filter(account=account, revoked_at=None).count() >= settings.RELAY_MAX_API_KEYS:
            raise QuotaExceeded(f"An account may have at most {settings.RELAY_MAX_API_KEYS} live API keys; "
                                "delete one first.", retry_after=60)
        api_key = ApiKey.objects.create(account=account, prefix=key[:10], key_hash=digest)
    logger.info("created API key %s… for account %s", api_key.prefix, account.login)
    return api_key, key


def api_key_revoke(*, account: Account, key_id: int) -> None:
    revoked = ApiKey.objects.filter(id=key_id, account=account, revoked_at=None).update(revoked_at=Now())
    key_revoked(account_id=account.id)
    if not revoked and not ApiKey.objects.filter(id=key_id, account=account).exists():
        raise NotFound()
    logger.info("revoked API key %s of account %s", key_id, account.login)


def key_revoked(*, account_id: int) -> None:
    """After a key of the account, or the account itself, was revoked or suspended: this
    process forgets its credentials now, and every other process before its next request."""
    identity.caches_forget_account(account_id)
    identity.revocation_announce()
