"""The MCP tool check_message, through the official SDK's client, against a live web
process with a spamd and a Celery worker: every check in one call."""
import pytest

from accounts.services import account_create_with_key
from tests import mail_corpus
from tests.api.agents.test_mcp import Http, call, error_of, run
from tests.helpers import deliver

pytestmark = pytest.mark.workers


def test_an_agent_checks_a_newsletter(checking_web):
    base, site = checking_web
    _, key = account_create_with_key(login="checker", plan="pro")
    _, stranger = account_create_with_key(login="stranger", plan="pro")
    mcp = Http(f"{base}/mcp")

    async def create():
        async with mcp.session(key) as session:
            return await call(session, "create_mailbox")

    box = run(create())
    message_id = deliver(mail_corpus.newsletter(box["address"], links=[f"{site.url}/ok", f"{site.url}/missing"]),
                         box["address"])[0]
    ids = {"mailbox_id": box["id"], "message_id": message_id}

    async def scenario():
        async with mcp.session(key) as session:
            everything = await call(session, "check_message", ids)
            only_html = await call(session, "check_message", {**ids, "checks": ["html"]})
        async with mcp.session(stranger) as session:
            refused = await error_of(session, "check_message", ids)
        return everything, only_html, refused

    everything, only_html, refused = run(scenario())
    assert list(everything) == ["html", "links", "spam", "headers"]
    assert "css-display-flex" in {feature["slug"] for feature in everything["html"]["features"]}
    assert everything["links"]["status"] == "done"
    assert [(link["url"], link["ok"]) for link in everything["links"]["links"]] == [(f"{site.url}/ok", True),
                                                                                  (f"{site.url}/missing", False)]
    assert everything["spam"]["is_spam"] is False and everything["spam"]["threshold"] == 5.0
    assert {check["name"]: check["ok"] for check in everything["headers"]["checks"]}["list_unsubscribe"] is True
    assert list(only_html) == ["html"]
    assert refused.startswith("not_found: ")
