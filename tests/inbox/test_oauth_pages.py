"""The web inbox's OAuth pages through Django's test client: "Apps and keys" shows every agent
that can still act for the account and revoking one ends all it holds; the consent page's
errors are pages for a person and JSON for a program, and its policy names only the origins
the client registered (docs/agents.md, "Connecting by URL")."""
import re
from datetime import timedelta

import time_machine
from django.conf import settings
from django.db.models.functions import Now
from django.test import Client
from django.utils import timezone
from oauth2_provider.models import get_access_token_model, get_refresh_token_model

from accounts.identity import token_grant
from tests.oauth_client import PAGE, PROGRAM, allow, authorize_query, refresh, register, signed_in, tokens

CALLBACK = "https://agent.example/cb"


def listed(browser: Client) -> list[str]:
    """The ids of the applications "Apps and keys" lists, each with its Revoke button."""
    return re.findall(r'name="application" value="(\d+)"', browser.get("/inbox/apps").content.decode())


def test_an_app_whose_access_token_lapsed_is_listed_while_its_refresh_token_can_mint_and_revoke_ends_it(db):
    browser, account = signed_in()
    client_id = register(CALLBACK)["client_id"]
    issued = tokens(browser, client_id, CALLBACK)
    assert token_grant(issued["access_token"], settings.RELAY_MCP_RESOURCE) is not None
    rotated = refresh(client_id, issued["refresh_token"])
    assert rotated.status_code == 200, rotated.content
    # The hour is over: the access token is dead, its refresh token can mint another for a month.
    get_access_token_model().objects.filter(user=account.oauth_user).update(expires=Now() - timedelta(minutes=1))
    apps = listed(browser)
    assert len(apps) == 1, "an app whose refresh token can still mint access tokens was not listed"

    assert browser.post("/inbox/apps", {"application": apps[0]}).status_code == 302
    assert listed(browser) == []
    again = refresh(client_id, rotated.json()["refresh_token"])
    assert again.status_code == 400 and again.json()["error"] == "invalid_grant", "a revoked app refreshed"
    assert not get_access_token_model().objects.filter(user=account.oauth_user).exists()
    assert token_grant(rotated.json()["access_token"], settings.RELAY_MCP_RESOURCE) is None


def test_revoking_an_app_ends_a_code_it_has_not_traded_yet(db):
    browser, account = signed_in()
    client_id = register(CALLBACK)["client_id"]
    url, verifier = authorize_query(client_id, CALLBACK)
    code = allow(browser, url)["code"]
    apps = listed(browser)
    assert len(apps) == 1, "an app holding a code it may still trade was not listed"
    browser.post("/inbox/apps", {"application": apps[0]})
    traded = Client().post("/oauth/token", {
        "grant_type": "authorization_code", "code": code, "redirect_uri": CALLBACK, "client_id": client_id,
        "code_verifier": verifier, "resource": settings.RELAY_MCP_RESOURCE})
    assert traded.status_code == 400 and traded.json()["error"] == "invalid_grant", traded.content


def test_the_list_judges_a_tokens_expiry_by_the_databases_clock(db):
    browser, account = signed_in()
    client_id = register(CALLBACK)["client_id"]
    tokens(browser, client_id, CALLBACK)
    # Only the access token can act, for its hour by the database's clock.
    get_refresh_token_model().objects.update(revoked=Now())
    with time_machine.travel(timezone.now() + timedelta(hours=2)):  # this process's clock runs ahead
        assert len(listed(browser)) == 1, "a live token was hidden by the web process's clock"
    get_access_token_model().objects.filter(user=account.oauth_user).update(expires=Now() - timedelta(minutes=1))
    with time_machine.travel(timezone.now() - timedelta(hours=2)):  # and behind
        assert listed(browser) == [], "a dead token was listed by the web process's clock"


def test_revoking_what_is_not_an_app_id_is_a_400_page(db):
    browser, _ = signed_in()
    # A number is read by the one rule for numbers a client sends (accounts/inputs.py): 400.
    refused = browser.post("/inbox/apps", {"application": "abc"})
    assert refused.status_code == 400 and b"<!doctype html>" in refused.content


def test_a_consent_that_cannot_go_back_to_its_client_is_a_page_for_a_person_and_json_for_a_program(db):
    browser, _ = signed_in()
    client_id = register(CALLBACK)["client_id"]
    unknown, _ = authorize_query("nobody", CALLBACK)
    elsewhere, _ = authorize_query(client_id, "https://attacker.example/cb")
    plain, _ = authorize_query(client_id, CALLBACK, code_challenge_method="plain")
    nameless, _ = authorize_query("", CALLBACK)
    for url, description in ((unknown, "Invalid client_id parameter value."),
                             (elsewhere, "Mismatching redirect URI."),
                             (plain, "PKCE with code_challenge_method=S256 is required."),
                             (nameless, "Missing client_id parameter.")):
        page = browser.get(url, **PAGE)
        assert page.status_code == 400 and page["Content-Type"].startswith("text/html"), (url, page.content[:300])
        text = page.content.decode()
        assert 'href="/static/inbox/' in text and f"invalid_request: {description}" in text, text
        assert "form-action 'self';" in page["Content-Security-Policy"], "a refused request widened the policy"
        assert "Location" not in page
        program = browser.get(url, **PROGRAM)
        assert program.status_code == 400 and program.json() == {"error": "invalid_request",
                                                                  "error_description": description}

    # The form's answer, tampered with: refused the same way, never a server error.
    for tampered in ({"client_id": "nobody", "redirect_uri": CALLBACK}, {"client_id": client_id}):
        answer = browser.post(unknown, {"scope": "mailboxes", "response_type": "code", "allow": "Authorize",
                                        **tampered}, **PAGE)
        assert answer.status_code == 400 and b"invalid_request" in answer.content, answer.content[:300]


def test_the_consent_pages_policy_names_the_registered_origins_and_never_the_requests(db):
    browser, _ = signed_in()
    client_id = register(CALLBACK, redirect_uris=[CALLBACK, "http://127.0.0.1:39999/callback"])["client_id"]
    # A loopback callback may name any port at the time of the request (RFC 8252).
    url, _ = authorize_query(client_id, "http://127.0.0.1:40123/callback")
    page = browser.get(url, **PAGE)
    assert page.status_code == 200 and 'id="consent"' in page.content.decode()
    assert "form-action 'self' https://agent.example http://127.0.0.1:*;" in page["Content-Security-Policy"]
