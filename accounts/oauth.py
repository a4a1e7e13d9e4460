"""An account as the OAuth toolkit sees it (a Django user of its own), and the one rule on a
client's redirect URIs: what a registration may name (api.oauth's registration checks it)
and what the consent page's form may answer to (the web inbox's page). Which account an
access token speaks for is accounts.identity's to say, as for every credential."""
import re
from urllib.parse import urlsplit

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models.signals import post_delete
from django.dispatch import receiver
from oauth2_provider.models import get_access_token_model

from accounts import identity
from accounts.models import Account

USERNAME = "relay-account-{id}"

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
# The loopback addresses whose callback may name any port at the time of the request (RFC
# 8252 §7.3, as the toolkit matches them); "localhost" keeps the port it registered.
ANY_PORT_LOOPBACK = {"127.0.0.1"}
# What a host may be to stand in a policy: a name or an IPv4 address, nothing CSP would read
# as a separator or a keyword.
POLICY_HOST = re.compile(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?")


def redirect_uri_allowed(uri: object) -> bool:
    """HTTPS, or http on a loopback host (a native agent's callback, RFC 8252)."""
    if not isinstance(uri, str):
        return False
    try:
        parts = urlsplit(uri)
        host, _ = parts.hostname, parts.port
    except ValueError:  # an unclosed IPv6 bracket, a bad port: not a URI to send anyone to
        return False
    return parts.scheme == "https" or (parts.scheme == "http" and host in LOOPBACK)


def consent_form_action(redirect_uris: str) -> str:
    """The sources a consent page's `form-action` adds to 'self': the origins of the client's
    registered redirect URIs that meet the registration rule (a browser applies form-action
    to the redirect that answers the form). Never the request's: its redirect URI is only
    one of these once the toolkit matched it, and a host in a policy must be a plain name."""
    sources = []
    for uri in redirect_uris.split():
        if not redirect_uri_allowed(uri):
            continue
        parts = urlsplit(uri)
        try:
            port = parts.port
        except ValueError:
            continue
        host = (parts.hostname or "").lower()
        if not POLICY_HOST.fullmatch(host):
            continue  # an IPv6 literal has no CSP spelling; anything else odd is left out
        if parts.scheme == "http" and host in ANY_PORT_LOOPBACK:
            source = f"http://{host}:*"
        else:
            source = f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")
        if source not in sources:
            sources.append(source)
    return " ".join(sources)


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
