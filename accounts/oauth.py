"""An account as the OAuth toolkit sees it (a Django user of its own), and the account an
access token speaks for, at the audience it is presented to (RFC 8707)."""
import copy
import hashlib

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models.signals import post_delete
from django.dispatch import receiver
from django.utils import timezone
from oauth2_provider.models import get_access_token_model

from accounts import credentials
from accounts.models import Account, AccountStatus

USERNAME = "relay-account-{id}"


def oauth_user_for(account: Account):
    """The account's Django user for the toolkit, made once; it has no usable password and
    no staff rights, so it opens nothing but the consent page."""
    if account.oauth_user_id is not None:
        return account.oauth_user
    with transaction.atomic():
        locked = Account.objects.select_for_update().get(id=account.id)
        if locked.oauth_user_id is None:
            user = get_user_model().objects.create_user(username=USERNAME.format(id=account.id))
            locked.oauth_user = user
            locked.save(update_fields=["oauth_user"])
        account.oauth_user = locked.oauth_user
    return account.oauth_user


def _account_id(token) -> int | None:
    account = getattr(token.user, "relay_account", None) if token.user_id else None
    return account.id if account is not None else None


# checksum -> token with its user's account: as API keys are (accounts/credentials.py).
_token_cache = credentials.Cache(account_of=_account_id)


def _token(checksum: str):
    return _token_cache.get(checksum, lambda: get_access_token_model().objects.select_related("user__relay_account")
                            .filter(token_checksum=checksum).first())


def token_grant(secret: str, audience: str) -> tuple[Account, frozenset[str]] | None:
    """(account, scopes) of a live access token bound to `audience`, or None: unknown,
    expired, revoked, or minted for another resource (an unbound token is refused too)."""
    token = _token(hashlib.sha256(secret.encode()).hexdigest())
    if token is None or token.expires <= timezone.now() or not token.resource or not token.allows_audience(audience):
        return None
    account = getattr(token.user, "relay_account", None) if token.user_id else None
    if account is None:
        return None
    # Each caller its own copy: a request may change its account's fields.
    return copy.copy(account), frozenset(token.scope.split())


@receiver(post_delete, sender=get_access_token_model())
def token_revoked(sender, instance, **kwargs) -> None:
    """A token revoked (the toolkit deletes it; so do the web inbox's connected apps and
    a refresh): this process forgets it now, every other before its next request."""
    _token_cache.forget(instance.token_checksum)
    credentials.revocation_announce()


def account_active(account: Account) -> bool:
    return account.status == AccountStatus.ACTIVE
