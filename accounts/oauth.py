"""An account as the OAuth toolkit sees it (a Django user of its own), and the account an
access token speaks for, at the audience it is presented to (RFC 8707)."""
import hashlib

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone
from oauth2_provider.models import get_access_token_model

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


def token_grant(secret: str, audience: str) -> tuple[Account, frozenset[str]] | None:
    """(account, scopes) of a live access token bound to `audience`, or None: unknown,
    expired, revoked, or minted for another resource (an unbound token is refused too)."""
    token = (get_access_token_model().objects.select_related("user__relay_account")
             .filter(token_checksum=hashlib.sha256(secret.encode()).hexdigest()).first())
    if token is None or token.expires <= timezone.now() or not token.resource or not token.allows_audience(audience):
        return None
    account = getattr(token.user, "relay_account", None) if token.user_id else None
    if account is None:
        return None
    return account, frozenset(token.scope.split())


def account_active(account: Account) -> bool:
    return account.status == AccountStatus.ACTIVE
