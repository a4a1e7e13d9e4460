"""Hosted agents sign in by URL (docs/agents.md, "Connecting by URL"): Relay as its own OAuth
authorization server, against a live web process. The official SDK's own OAuth client
provider finds its way from a bare 401, registers, has the person consent in the web
inbox and calls tools; the rest of the grant's rules over plain HTTP, as any client sends them."""
import asyncio
import base64
import hashlib
import re
import secrets
from html import unescape
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx2
import pytest
import requests
from mcp import Client
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from accounts.services import account_create_with_key, account_suspend
from tests.helpers import answers, free_port, wait_until

pytestmark = pytest.mark.workers
REDIRECT = "http://127.0.0.1:39999/callback"


@pytest.fixture(scope="module")
def relay(module_processes):
    """A web process whose public URL is its own: the issuer and the resource it names."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    module_processes.web("oauth-web", port, env={"RELAY_PUBLIC_URL": base})
    module_processes.wait_ready()
    wait_until(lambda: answers(base + "/readyz", status=200), timeout=30, message="the web process")
    return base


@pytest.fixture
def person(relay, transactional_db, broker):
    """An account holder signed in to the web inbox (by pasting their key), as a browser."""
    account, key = account_create_with_key(login="olivia", email="olivia@example.com", plan="pro")
    browser = requests.Session()
    browser.get(relay + "/inbox/sign-in", timeout=10)
    signed_in = browser.post(relay + "/inbox/sign-in", timeout=10, allow_redirects=False,
                             headers={"Referer": relay + "/inbox/sign-in"},
                             data={"form": "key", "key": key, "csrfmiddlewaretoken": browser.cookies["csrftoken"]})
    assert signed_in.status_code == 302, signed_in.text
    browser.account = account
    return browser


def consent(browser, url: str, *, allow: bool = True) -> dict:
    """Open the consent page at `url` as the signed-in person and press Allow (or Deny);
    the query the client's redirect URI gets back."""
    page = browser.get(url, timeout=10)
    assert page.status_code == 200, page.text[:2000]
    # A browser applies form-action to the answer's redirect: the client's registered origin
    # is allowed, a loopback one on any port (RFC 8252).
    assert "form-action 'self' http://127.0.0.1:*;" in page.headers["Content-Security-Policy"]
    found = re.search(r'<form id="consent".*?</form>', page.text, re.S)
    assert found, f"no consent form at {page.url}: {page.text[:3000]}"
    form = found.group(0)
    hidden = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form)
    fields = {name: unescape(value) for name, value in hidden}
    if allow:
        fields["allow"] = "Authorize"
    answer = browser.post(url, data=fields, timeout=10, allow_redirects=False, headers={"Referer": url})
    assert answer.status_code == 302, answer.text[:2000]
    location = answer.headers["Location"]
    assert location.startswith(REDIRECT), location
    return {name: values[0] for name, values in parse_qs(urlsplit(location).query).items()}


def register(relay: str) -> str:
    """A public client registered dynamically (RFC 7591); its client_id."""
    answer = requests.post(relay + "/oauth/register", timeout=10, json={
        "client_name": "A test agent", "redirect_uris": [REDIRECT], "response_types": ["code"],
        "grant_types": ["authorization_code", "refresh_token"], "token_endpoint_auth_method": "none"})
    assert answer.status_code == 201, answer.text
    return answer.json()["client_id"]


def test_registration_takes_https_or_loopback_redirects_only(relay, transactional_db):
    def register_with(uri: str) -> int:
        return requests.post(relay + "/oauth/register", timeout=10, json={
            "client_name": "x", "redirect_uris": [uri], "token_endpoint_auth_method": "none"}).status_code

    assert register_with("http://evil.example/callback") == 400
    assert register_with("https://agent.example/callback") == 201
    assert register_with("http://localhost:8123/callback") == 201


def grant(relay: str, browser, client_id: str, *, scope: str, resource: str | None = None) -> dict:
    """The whole authorization code grant with PKCE S256, as a client sends it: the token answer."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    resource = resource or relay + "/mcp"
    query = {"response_type": "code", "client_id": client_id, "redirect_uri": REDIRECT, "scope": scope,
             "state": "s1", "code_challenge": challenge, "code_challenge_method": "S256", "resource": resource}
    answer = consent(browser, f"{relay}/oauth/authorize?{urlencode(query)}")
    assert answer["state"] == "s1" and answer.get("iss") == relay
    token = requests.post(relay + "/oauth/token", timeout=10, data={
        "grant_type": "authorization_code", "code": answer["code"], "redirect_uri": REDIRECT, "client_id": client_id,
        "code_verifier": verifier, "resource": resource})
    assert token.status_code == 200, token.text
    return token.json()


def mcp_call(relay: str, token: str, tool: str, arguments: dict) -> requests.Response:
    return requests.post(relay + "/mcp", timeout=30, headers={
        "Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25"},
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}})


class Memory:
    """The SDK's token storage, in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client

    async def set_client_info(self, client_info):
        self.client = client_info


def sdk_provider(relay: str, browser, *, name: str, scope: str, storage: "Memory", **options) -> OAuthClientProvider:
    """The official SDK's OAuth client provider whose "browser" is `browser`, a person signed
    in to the web inbox who presses Allow on the consent page the SDK sends them to."""
    pending: dict = {}

    async def redirect_handler(url: str) -> None:
        pending.update(await asyncio.to_thread(consent, browser, url))

    async def callback_handler() -> AuthorizationCodeResult:
        return AuthorizationCodeResult(code=pending["code"], state=pending.get("state"), iss=pending.get("iss"))

    return OAuthClientProvider(
        server_url=relay + "/mcp", storage=storage, redirect_handler=redirect_handler,
        callback_handler=callback_handler, **options,
        client_metadata=OAuthClientMetadata(client_name=name, redirect_uris=[REDIRECT],
                                            grant_types=["authorization_code", "refresh_token"],
                                            response_types=["code"], token_endpoint_auth_method="none", scope=scope))


def test_the_metadata_documents_and_a_bare_401_lead_an_agent_to_sign_in(relay, transactional_db):
    bare = requests.post(relay + "/mcp", json={}, timeout=10)
    assert bare.status_code == 401
    challenge = bare.headers["WWW-Authenticate"]
    assert f'resource_metadata="{relay}/.well-known/oauth-protected-resource/mcp"' in challenge
    assert 'scope="mailboxes mail:read mail:send domains"' in challenge
    for path in ("/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"):
        resource = requests.get(relay + path, timeout=10).json()
        assert resource["resource"] == relay + "/mcp" and resource["authorization_servers"] == [relay]
        assert resource["bearer_methods_supported"] == ["header"]
        assert set(resource["scopes_supported"]) == {"mailboxes", "mail:read", "mail:send", "domains"}
    server = requests.get(relay + "/.well-known/oauth-authorization-server", timeout=10).json()
    assert server["issuer"] == relay, "the issuer must be exactly what the resource names"
    assert server["code_challenge_methods_supported"] == ["S256"]
    assert server["registration_endpoint"] == relay + "/oauth/register"
    assert server["revocation_endpoint"] == relay + "/oauth/revoke"
    assert server["client_id_metadata_document_supported"] is True
    assert server["response_types_supported"] == ["code"]
    assert set(server["grant_types_supported"]) == {"authorization_code", "refresh_token"}


def test_the_sdks_oauth_client_signs_in_from_a_bare_401_and_calls_tools(relay, person):
    storage = Memory()
    provider = sdk_provider(relay, person, name="SDK agent", scope="mailboxes mail:read", storage=storage)

    async def scenario():
        async with httpx2.AsyncClient(auth=provider, timeout=30) as http:
            async with Client(streamable_http_client(relay + "/mcp", http_client=http)) as client:
                tools = {tool.name for tool in (await client.list_tools()).tools}
                made = await client.call_tool("create_mailbox", {"local_part": "agent-made"})
                return tools, made.structured_content

    tools, made = asyncio.run(scenario())
    assert "wait_for_code" in tools and made["address"].startswith("agent-made@")
    assert storage.client is not None, "the SDK did not register"
    token = storage.tokens.access_token
    elsewhere = requests.get(relay + "/api/v1/mailboxes", headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert elsewhere.status_code == 401, "a token minted for /mcp was taken by the REST API (RFC 8707)"


def test_a_grant_is_held_to_its_scopes_its_resource_and_the_header(relay, person):
    client_id = register(relay)
    narrow = grant(relay, person, client_id, scope="mail:read")["access_token"]
    assert mcp_call(relay, narrow, "list_messages", {"mailbox_id": "00000000-0000-0000-0000-000000000000"}).ok
    refused = mcp_call(relay, narrow, "create_mailbox", {})
    assert refused.status_code == 403, refused.text
    assert refused.headers["WWW-Authenticate"] == 'Bearer realm="relay", error="insufficient_scope", scope="mailboxes"'
    narrow_api = grant(relay, person, client_id, scope="mail:read", resource=relay + "/api/v1")["access_token"]
    bearer = {"Authorization": f"Bearer {narrow_api}"}
    api = requests.post(relay + "/api/v1/mailboxes", json={}, headers=bearer, timeout=10)
    assert api.status_code == 403 and 'scope="mailboxes"' in api.headers["WWW-Authenticate"]
    assert requests.get(relay + "/api/v1/messages", headers=bearer, timeout=10).status_code == 200
    keys = requests.get(relay + "/api/v1/keys", headers=bearer, timeout=10)
    assert keys.status_code == 403, "an access token reached the account's keys"

    elsewhere = grant(relay, person, client_id, scope="mailboxes", resource="https://elsewhere.example/mcp")
    assert mcp_call(relay, elsewhere["access_token"], "list_mailboxes", {}).status_code == 401

    for_the_api = grant(relay, person, client_id, scope="mailboxes", resource=relay + "/api/v1")["access_token"]
    listed = requests.get(relay + "/api/v1/mailboxes", headers={"Authorization": f"Bearer {for_the_api}"}, timeout=10)
    assert listed.status_code == 200, listed.text
    assert mcp_call(relay, for_the_api, "list_mailboxes", {}).status_code == 401, "an API token was taken by /mcp"
    in_the_query = requests.get(f"{relay}/api/v1/mailboxes?access_token={for_the_api}", timeout=10)
    assert in_the_query.status_code == 401, "a token in the query string was taken"


def test_revocation_suspension_and_a_reused_refresh_token_end_a_grant_at_once(relay, person):
    client_id = register(relay)
    first = grant(relay, person, client_id, scope="mailboxes")
    assert mcp_call(relay, first["access_token"], "list_mailboxes", {}).ok
    refresh = {"grant_type": "refresh_token", "client_id": client_id, "refresh_token": first["refresh_token"],
               "resource": relay + "/mcp"}
    rotated = requests.post(relay + "/oauth/token", data=refresh, timeout=10)
    assert rotated.status_code == 200 and rotated.json()["refresh_token"] != first["refresh_token"]
    again = requests.post(relay + "/oauth/token", data=refresh, timeout=10)
    assert again.status_code == 400 and again.json()["error"] == "invalid_grant", "a refresh token worked twice"

    second = grant(relay, person, client_id, scope="mailboxes")["access_token"]
    revoked = requests.post(relay + "/oauth/revoke", data={"token": second, "client_id": client_id}, timeout=10)
    assert revoked.status_code == 200
    assert mcp_call(relay, second, "list_mailboxes", {}).status_code == 401

    third = grant(relay, person, client_id, scope="mailboxes")["access_token"]
    account_suspend(account=person.account)
    assert mcp_call(relay, third, "list_mailboxes", {}).status_code == 403


def test_a_token_cached_by_another_process_is_refused_there_on_the_next_request(relay, person, module_processes):
    port = free_port()
    other = f"http://127.0.0.1:{port}"  # the same Relay (its public URL, so its resource), another process
    module_processes.web("oauth-web-2", port, env={"RELAY_PUBLIC_URL": relay})
    module_processes.wait_ready()
    wait_until(lambda: answers(other + "/readyz", status=200), timeout=30, message="the second web process")
    client_id = register(relay)
    token = grant(relay, person, client_id, scope="mailboxes")["access_token"]
    for _ in range(3):  # cached by the second process
        assert mcp_call(other, token, "list_mailboxes", {}).ok
    assert requests.post(relay + "/oauth/revoke", data={"token": token, "client_id": client_id},
                         timeout=10).status_code == 200
    assert mcp_call(other, token, "list_mailboxes", {}).status_code == 401

    kept = grant(relay, person, client_id, scope="mailboxes")["access_token"]
    assert mcp_call(other, kept, "list_mailboxes", {}).ok
    account_suspend(account=person.account)
    assert mcp_call(other, kept, "list_mailboxes", {}).status_code == 403


def test_deny_sends_access_denied_and_connected_apps_revoke(relay, person):
    client_id = register(relay)
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    query = {"response_type": "code", "client_id": client_id, "redirect_uri": REDIRECT, "scope": "mailboxes",
             "state": "s2", "code_challenge": challenge, "code_challenge_method": "S256", "resource": relay + "/mcp"}
    denied = consent(person, f"{relay}/oauth/authorize?{urlencode(query)}", allow=False)
    assert denied["error"] == "access_denied" and denied["state"] == "s2"
    plain = {**query, "code_challenge": verifier, "code_challenge_method": "plain"}
    refused = person.get(f"{relay}/oauth/authorize?{urlencode(plain)}", timeout=10, allow_redirects=False)
    assert 'id="consent"' not in refused.text, "PKCE plain was offered a consent"
    assert "invalid_request" in refused.headers.get("Location", "") + refused.text

    token = grant(relay, person, client_id, scope="mailboxes")["access_token"]
    apps = person.get(relay + "/inbox/apps", timeout=10)
    assert "A test agent" in apps.text
    application = re.search(r'name="application" value="(\d+)"', apps.text).group(1)
    person.post(relay + "/inbox/apps", timeout=10, headers={"Referer": relay + "/inbox/apps"},
                data={"application": application, "csrfmiddlewaretoken": person.cookies["csrftoken"]})
    assert mcp_call(relay, token, "list_mailboxes", {}).status_code == 401


def test_the_mcp_inspector_cli_connects_with_an_access_token(relay, person):
    """A client Relay did not write, given an access token as a hosted agent holds it."""
    import shutil
    import subprocess

    if not shutil.which("npx"):
        pytest.skip("needs npx (Node.js) for the MCP Inspector")
    token = grant(relay, person, register(relay), scope="mailboxes mail:read")["access_token"]
    listed = subprocess.run(
        ["npx", "-y", "@modelcontextprotocol/inspector@2.12.0", "--cli", relay + "/mcp", "--transport", "http",
         "--method", "tools/list", "--header", f"Authorization: Bearer {token}"],
        capture_output=True, text=True, timeout=240)
    assert listed.returncode == 0, listed.stderr[-3000:]
    assert '"wait_for_code"' in listed.stdout


def test_a_client_id_metadata_document_on_a_private_address_is_refused(relay, person):
    """A client ID that is an HTTPS URL is fetched under the address rules: loopback is no client."""
    client_id = "https://127.0.0.1:9/agent/client.json"
    query = {"response_type": "code", "client_id": client_id, "redirect_uri": REDIRECT, "scope": "mailboxes",
             "state": "s3", "code_challenge": "x" * 43, "code_challenge_method": "S256", "resource": relay + "/mcp"}
    refused = person.get(f"{relay}/oauth/authorize?{urlencode(query)}", timeout=30, allow_redirects=False)
    assert 'id="consent"' not in refused.text and refused.status_code in (400, 401, 403), refused.status_code


@pytest.fixture(scope="module")
def client_document(certificates):
    """An agent's client ID metadata document, served over HTTPS (a certificate of the
    suite's own CA) on this machine; its URL is the client's id."""
    import http.server
    import json
    import ssl
    import threading

    port = free_port()
    url = f"https://localhost:{port}/agent/client.json"
    def document(client_id: str, redirect_uri: str) -> bytes:
        return json.dumps({"client_id": client_id, "client_name": "An agent by its document",
                           "redirect_uris": [redirect_uri], "grant_types": ["authorization_code", "refresh_token"],
                           "response_types": ["code"], "token_endpoint_auth_method": "none"}).encode()

    # /agent/plain-http.json names a callback no registration may name (http, not loopback).
    documents = {"/agent/client.json": document(url, REDIRECT),
                 "/agent/plain-http.json": document(url.replace("client.json", "plain-http.json"),
                                                    "http://agent.example/cb")}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the standard library's name)
            self.send_response(200 if self.path in documents else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(documents.get(self.path, b"{}"))

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificates / "server.pem", certificates / "server.key")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield url
    server.shutdown()


@pytest.fixture(scope="module")
def relay_trusting_this_machine(module_processes, certificates):
    """A web process that may fetch client documents from this machine (a private address,
    allowed as for webhooks with RELAY_WEBHOOK_ALLOW_PRIVATE) and trusts the suite's CA."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    module_processes.web("oauth-web-cimd", port, env={"RELAY_PUBLIC_URL": base, "RELAY_WEBHOOK_ALLOW_PRIVATE": "true",
                                                      "RELAY_WEBHOOK_CA_FILE": str(certificates / "ca.pem")})
    module_processes.wait_ready()
    wait_until(lambda: answers(base + "/readyz", status=200), timeout=30, message="the web process")
    return base


def test_a_client_id_document_meets_the_registration_rule_too(relay_trusting_this_machine, client_document,
                                                             transactional_db, broker):
    relay = relay_trusting_this_machine
    _, key = account_create_with_key(login="quinn", email="quinn@example.com", plan="pro")
    browser = requests.Session()
    browser.get(relay + "/inbox/sign-in", timeout=10)
    browser.post(relay + "/inbox/sign-in", timeout=10, headers={"Referer": relay + "/inbox/sign-in"},
                 data={"form": "key", "key": key, "csrfmiddlewaretoken": browser.cookies["csrftoken"]})
    query = {"response_type": "code", "client_id": client_document.replace("client.json", "plain-http.json"),
             "redirect_uri": "http://agent.example/cb", "scope": "mailboxes", "state": "s4",
             "code_challenge": "x" * 43, "code_challenge_method": "S256", "resource": relay + "/mcp"}
    refused = browser.get(f"{relay}/oauth/authorize?{urlencode(query)}", timeout=30, allow_redirects=False,
                          headers={"Accept": "text/html"})
    assert 'id="consent"' not in refused.text and refused.status_code in (400, 401, 403), refused.status_code
    assert "agent.example" not in refused.headers.get("Location", "")


def test_the_sdk_signs_in_as_a_client_id_metadata_document(relay_trusting_this_machine, client_document,
                                                            transactional_db, broker):
    relay = relay_trusting_this_machine
    _, key = account_create_with_key(login="petra", email="petra@example.com", plan="pro")
    browser = requests.Session()
    browser.get(relay + "/inbox/sign-in", timeout=10)
    browser.post(relay + "/inbox/sign-in", timeout=10, headers={"Referer": relay + "/inbox/sign-in"},
                 data={"form": "key", "key": key, "csrfmiddlewaretoken": browser.cookies["csrftoken"]})
    storage = Memory()
    provider = sdk_provider(relay, browser, name="An agent by its document", scope="mailboxes", storage=storage,
                            client_metadata_url=client_document)

    async def scenario():
        async with httpx2.AsyncClient(auth=provider, timeout=30) as http:
            async with Client(streamable_http_client(relay + "/mcp", http_client=http)) as client:
                return (await client.call_tool("list_mailboxes", {})).structured_content

    assert "mailboxes" in asyncio.run(scenario())
    assert storage.client is not None and str(storage.client.client_id) == client_document, \
        "the SDK did not use its document's URL as its id"


def test_a_person_allows_an_agent_in_a_real_browser_and_the_code_reaches_its_callback(relay, transactional_db,
                                                                                      broker):
    """The consent in headless Chromium: signed in, Allow pressed, the browser carried to the
    agent's loopback callback with the code (the page's policy lets the form go there)."""
    import http.server
    import shutil
    import threading

    from selenium.webdriver.common.by import By

    from tests.helpers import headless_chromium

    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        pytest.skip("needs Debian's chromium and chromium-driver (make test installs them)")
    _, key = account_create_with_key(login="quinn", email="quinn@example.com", plan="pro")
    callbacks: list[str] = []

    class Callback(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the standard library's name)
            callbacks.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    port = free_port()
    listener = http.server.ThreadingHTTPServer(("127.0.0.1", port), Callback)
    threading.Thread(target=listener.serve_forever, daemon=True).start()
    redirect = f"http://127.0.0.1:{port}/callback"
    client = requests.post(relay + "/oauth/register", timeout=10, json={
        "client_name": "A browser agent", "redirect_uris": [redirect], "token_endpoint_auth_method": "none"})
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    query = {"response_type": "code", "client_id": client.json()["client_id"], "redirect_uri": redirect,
             "scope": "mailboxes", "state": "b1", "code_challenge": challenge, "code_challenge_method": "S256",
             "resource": relay + "/mcp"}
    driver = headless_chromium()
    try:
        driver.get(f"{relay}/oauth/authorize?{urlencode(query)}")
        wait_until(lambda: driver.find_elements(By.ID, "key"), timeout=10, message="the sign-in page first")
        driver.find_element(By.ID, "key").send_keys(key)
        driver.find_element(By.ID, "key").submit()
        wait_until(lambda: driver.find_elements(By.ID, "allow"), timeout=10, message="the consent page after it")
        assert "A browser agent" in driver.page_source and redirect in driver.page_source
        driver.find_element(By.ID, "allow").click()
        wait_until(lambda: callbacks, timeout=10, message="the browser at the agent's callback")
    finally:
        driver.quit()
        listener.shutdown()
    answer = parse_qs(urlsplit(callbacks[0]).query)
    assert answer["state"] == ["b1"] and answer["code"][0]
