"""api.agents.server.CredentialsGate, called as ASGI (tests/api/agents/test_mcp.py drives it
with the official SDK's client): what it refuses before the SDK, and what it lets through."""
from accounts.services import account_create_with_key
from api.agents.server import CredentialsGate, origin_allowed
from api.agents.declare import CREDENTIALS
from tests.helpers import run_async


def call(method: str, headers: dict) -> tuple[int, list]:
    reached = []

    async def app(scope, receive, send):
        reached.append(CREDENTIALS.get().principal.owner.login)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    sent = []

    async def receive():
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": method, "scheme": "http", "server": ("127.0.0.1", 8000), "path": "/mcp",
             "headers": [(name.lower().encode(), value.encode()) for name, value in
                         {"host": "127.0.0.1:8000", **headers}.items()]}
    run_async(CredentialsGate(app)(scope, receive, send))
    return sent[0]["status"], reached


def test_the_gate_refuses_what_the_api_refuses_and_passes_a_valid_key_on(transactional_db):
    _, key = account_create_with_key(login="gated")
    assert call("POST", {}) == (401, [])
    assert call("POST", {"authorization": "Bearer rk_not-a-key"}) == (401, [])
    assert call("GET", {"authorization": f"Bearer {key}"}) == (405, [])
    assert call("POST", {"authorization": f"Bearer {key}", "origin": "https://evil.test"}) == (403, [])
    assert call("POST", {"authorization": f"Bearer {key}"}) == (200, ["gated"])


def test_an_origin_is_served_when_relay_mcp_allowed_origins_names_it_exactly(settings):
    def scope(origin: str) -> dict:
        return {"scheme": "http", "headers": [(b"host", b"127.0.0.1:8000"), (b"origin", origin.encode())]}

    assert origin_allowed(scope("http://127.0.0.1:8000")) and not origin_allowed(scope("https://agent.example"))
    settings.RELAY_MCP_ALLOWED_ORIGINS = ["https://agent.example"]
    assert origin_allowed(scope("https://agent.example")) and origin_allowed(scope("https://AGENT.example:443"))
    assert not origin_allowed(scope("https://agent.example:8443")) and not origin_allowed(scope("http://agent.example"))


def test_every_tool_and_every_account_route_declares_its_scope():
    """api.authentication's ROUTES and TOOLS are the one table: a tool or a mailbox route
    missing from it would be closed to every access token, or worse, open to all."""
    from django.urls import get_resolver

    from api.agents.server import build
    from api.authentication import ALL, ROUTES, TOOLS

    tools = {tool.name for tool in build()._tool_manager.list_tools()}
    assert set(TOOLS) == tools and set(TOOLS.values()) <= set(ALL)
    views = {getattr(pattern.callback, "cls", None) for pattern in get_resolver("api.urls").url_patterns}
    unlisted = {view.__name__ for view in views if view is not None} - set(ROUTES)
    assert unlisted == {"SignUpView", "ActivateView", "RecoverView", "RecoverConfirmView", "AccountView",
                        "KeyCollectionView", "KeyDetailView", "WebhookCollectionView", "WebhookDetailView",
                        "WebhookDeliveriesView"}, "a route has no scope: say which, or that it is an API key's alone"
