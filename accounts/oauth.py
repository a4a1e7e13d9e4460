"""An account as the OAuth toolkit sees it (a Django user of its own). Which account an
access token speaks for is accounts.identity's to say, as for every credential."""
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models.signals import post_delete
from django.dispatch import receiver
from oauth2_provider.models import get_access_token_model

from accounts import identity
from accounts.models import Account

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


@receiver(post_delete, sender=get_access_token_model())
def token_revoked(sender, instance, **kwargs) -> None:
    """A token revoked (the toolkit deletes it; so do the web inbox's connected apps and
    a refresh): this process forgets it now, every other before its next request."""
    identity.access_token_forget(instance.token_checksum)
    identity.revocation_announce()
