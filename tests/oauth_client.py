"""An agent's side of OAuth against Relay through Django's test client (tests/api/agents/test_oauth.py
drives a live web process with the official SDK): registering, a person's consent in the web
inbox, the code traded for tokens, refreshing. Each answer is asserted where it is made."""
import base64
import hashlib
import json
import re
import secrets
from html import unescape
from urllib.parse import parse_qs, urlencode, urlsplit

from django.conf import settings
from django.test import Client

from accounts.models import Account
from accounts.services import account_create_with_key

# What a browser sends when it opens a page, and what a program sends.
PAGE = {"HTTP_ACCEPT": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}
PROGRAM = {"HTTP_ACCEPT": "application/json"}


def signed_in(login: str = "olivia") -> tuple[Client, Account]:
    """A person's browser, signed in to the web inbox with their key."""
    account, key = account_create_with_key(login=login, email=f"{login}@example.com", plan="pro")
    browser = Client()
    assert browser.post("/inbox/sign-in", {"form": "key", "key": key}).status_code == 302
    account.refresh_from_db()  # signing in gave it its user for the toolkit
    return browser, account


def register(redirect_uri: str, **metadata) -> dict:
    """A public client registered dynamically (RFC 7591): the registration's answer."""
    answer = Client().post("/oauth/register", json.dumps({
        "client_name": "A test agent", "redirect_uris": [redirect_uri], "token_endpoint_auth_method": "none",
        **metadata}), content_type="application/json")
    assert answer.status_code == 201, answer.content
    return answer.json()


def authorize_query(client_id: str, redirect_uri: str, **changes) -> tuple[str, str]:
    """(the /oauth/authorize URL, its PKCE verifier) for the code grant with S256."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    query = {"response_type": "code", "client_id": client_id, "redirect_uri": redirect_uri, "scope": "mailboxes",
             "state": "s1", "code_challenge": challenge, "code_challenge_method": "S256",
             "resource": settings.RELAY_MCP_RESOURCE, **changes}
    return "/oauth/authorize?" + urlencode(query), verifier


def allow(browser: Client, url: str) -> dict:
    """The consent page at `url`, Allow pressed: the query the client's callback gets."""
    page = browser.get(url, **PAGE)
    assert page.status_code == 200, page.content[:2000]
    form = re.search(r'<form id="consent".*?</form>', page.content.decode(), re.S).group(0)
    hidden = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form)
    fields = {name: unescape(value) for name, value in hidden}
    answer = browser.post(url, {**fields, "allow": "Authorize"}, **PAGE)
    assert answer.status_code == 302, answer.content[:2000]
    return {name: values[0] for name, values in parse_qs(urlsplit(answer["Location"]).query).items()}


def tokens(browser: Client, client_id: str, redirect_uri: str) -> dict:
    """The whole code grant: consent, then the code traded at /oauth/token."""
    url, verifier = authorize_query(client_id, redirect_uri)
    code = allow(browser, url)["code"]
    answer = Client().post("/oauth/token", {
        "grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri, "client_id": client_id,
        "code_verifier": verifier, "resource": settings.RELAY_MCP_RESOURCE})
    assert answer.status_code == 200, answer.content
    return answer.json()


def refresh(client_id: str, refresh_token: str):
    return Client().post("/oauth/token", {"grant_type": "refresh_token", "client_id": client_id,
                                          "refresh_token": refresh_token,
                                          "resource": settings.RELAY_MCP_RESOURCE})
