"""accounts.identity, the one guest book every door asks: an account that may not act is
refused the same way with the same error by each door (the API with a key or an access
token, /mcp, runmcp, the web inbox, SMTP's RCPT), and an access token's expiry is the
database's clock's to judge, whatever this host's clock says."""
import json
import secrets
from datetime import timedelta

import pytest
import time_machine
from django.conf import settings
from django.core.management import CommandError, call_command
from django.test import Client
from oauth2_provider.models import get_access_token_model, get_application_model
from rest_framework.test import APIClient

from accounts import identity
from accounts.models import Account, AccountStatus
from accounts.oauth import oauth_user_for
from accounts.services import account_create_with_key, account_suspend
from api.agents.server import _credentials_for
from core.clock import db_now
from mailboxes.messages import recipient_by_address
from tests.helpers import make_mailbox, wait_until


def access_token(account: Account, *, expires_in: timedelta) -> str:
    """A new access token of `account`, bound to the API and /mcp, expiring `expires_in`
    from now by the database's clock."""
    application = get_application_model().objects.create(
        name="agent", client_type="public", authorization_grant_type="authorization-code",
        redirect_uris="http://127.0.0.1:39999/callback")
    secret = secrets.token_urlsafe(32)
    get_access_token_model().objects.create(
        user=oauth_user_for(account), application=application, token=secret, expires=db_now() + expires_in,
        scope="mailboxes mail:read", resource=[settings.RELAY_API_RESOURCE, settings.RELAY_MCP_RESOURCE])
    return secret


def whoami(secret: str):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client.get("/api/v1/whoami")


# --- one rule for whether an account may act, on every door -------------------------------------
def suspended(account: Account) -> None:
    account_suspend(account=account)


def awaiting_activation(account: Account) -> None:
    # No service moves an account back to provisioned; an account suspended before it was
    # ever activated lands there when unsuspended, which is this.
    Account.objects.filter(id=account.id).update(status=AccountStatus.PROVISIONED)
    identity.caches_clear_all()


@pytest.mark.parametrize("make, code, message", [
    (suspended, "account_suspended", identity.SUSPENDED),
    (awaiting_activation, "forbidden", identity.NOT_ACTIVE),
])
def test_an_account_that_may_not_act_is_refused_by_every_door_with_the_same_error(db, make, code, message):
    account, key = account_create_with_key(login="idle", email="idle@example.com")
    token = access_token(account, expires_in=timedelta(hours=1))
    mailbox = make_mailbox("idle-box", owner=account)
    signed_in = Client()
    assert signed_in.post("/inbox/sign-in", {"form": "key", "key": key}).status_code == 302
    assert signed_in.get("/inbox/mailboxes").status_code == 200
    for secret in (key, token):  # active, every door lets it in
        assert whoami(secret).status_code == 200
        assert not isinstance(_credentials_for(f"Bearer {secret}", "http://relay.test"), tuple)
    assert recipient_by_address(mailbox.address) is not None
    make(account)

    for secret in (key, token):  # the API, with a key and with an access token
        response = whoami(secret)
        assert (response.status_code, response.json()["code"], response.json()["message"]) == (403, code, message)
    for secret in (key, token):  # /mcp's gate, before the SDK sees the request
        status, body, _ = _credentials_for(f"Bearer {secret}", "http://relay.test")
        assert (status, json.loads(body)["code"], json.loads(body)["message"]) == (403, code, message)
    with pytest.raises(CommandError, match=message):  # runmcp, over stdio
        call_command("runmcp", key=key)
    # The web inbox: the session ends; the key pasted again is told what the API says.
    assert signed_in.get("/inbox/mailboxes").status_code == 302
    page = Client().post("/inbox/sign-in", {"form": "key", "key": key})
    assert page.status_code == 200 and message in page.content.decode()
    # SMTP: its mailboxes take no mail.
    assert recipient_by_address(mailbox.address) is None


# --- an access token's expiry, by the database's clock ------------------------------------------
def test_a_token_expired_by_the_databases_clock_is_refused_while_this_hosts_clock_is_behind(db):
    account, _ = account_create_with_key(login="late", email="late@example.com")
    expired = access_token(account, expires_in=-timedelta(seconds=1))
    live = access_token(account, expires_in=timedelta(minutes=5))
    with time_machine.travel(db_now() - timedelta(hours=1)):  # this host an hour behind
        assert whoami(expired).status_code == 401
        assert whoami(live).status_code == 200
    with time_machine.travel(db_now() + timedelta(hours=1)):  # an hour ahead: the token lives on
        assert whoami(live).status_code == 200


def test_a_cached_token_lapses_when_the_database_says_it_expired(db, settings):
    settings.RELAY_KEY_CACHE_SECONDS = 60
    account, _ = account_create_with_key(login="brief", email="brief@example.com")
    # Long enough to be live at its first use on a slow machine (1 s was not, once).
    token = access_token(account, expires_in=timedelta(seconds=4))
    with time_machine.travel(db_now() - timedelta(hours=1)):
        assert whoami(token).status_code == 200  # now cached, for far longer than it lives
        assert identity._token_cache.entries, "the token was not cached: this test would prove nothing"
        expires = get_access_token_model().objects.get(token=token).expires
        wait_until(lambda: db_now() > expires, timeout=10, message="the token's expiry by the database's clock")
        assert whoami(token).status_code == 401
