"""One shape per resource (docs/architecture.md, "One shape per resource"): the API's
serializers are the source, and each other door's copy of a shape fails here when it
parts from them: the MCP tools' outputSchemas, the webhook payloads, the Python client's
types (generated from the OpenAPI schema, as the TypeScript client's are)."""
import asyncio
import importlib.util

import pytest
from drf_spectacular.generators import SchemaGenerator

from accounts.models import Account
from api.agents.server import build
from mailboxes.lifecycle import mailboxes_force_expire
from tests import mail_corpus
from tests.helpers import ROOT, create_mailbox, deliver
from webhooks.models import Webhook, WebhookDelivery


@pytest.fixture(scope="module")
def components() -> dict:
    return SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]


def _resolved(prop: dict, components: dict) -> dict:
    while "$ref" in prop or len(prop.get("allOf", ())) == 1:
        ref = prop["$ref"] if "$ref" in prop else prop["allOf"][0]["$ref"]
        prop = {**components[ref.rsplit("/", 1)[1]], "nullable": prop.get("nullable", False)}
    return prop


def _openapi_type(prop: dict, components: dict) -> tuple[str, bool]:
    """(JSON type, nullable) of an OpenAPI property."""
    nullable = prop.get("nullable", False)
    for choice in prop.get("oneOf", ()):
        if _resolved(choice, components).get("enum") != [None]:
            prop = choice
    prop = _resolved(prop, components)
    return ("string" if "enum" in prop else prop.get("type", "object")), nullable


def _mcp_type(prop: dict) -> tuple[str, bool]:
    """(JSON type, nullable) of a property of a tool's outputSchema."""
    choices = prop.get("anyOf", [prop])
    nullable = {"type": "null"} in choices
    (kind,) = [choice for choice in choices if choice != {"type": "null"}]
    return ("object" if "$ref" in kind else kind.get("type", "object")), nullable


# The tools whose result is a resource, where in their outputSchema it sits, and its shape.
TOOL_SHAPES = [
    ("create_mailbox", None, "Mailbox"), ("get_mailbox", None, "Mailbox"), ("renew_mailbox", None, "Mailbox"),
    ("list_mailboxes", "mailboxes", "Mailbox"), ("list_messages", "messages", "MessageSummary"),
    ("search_messages", "messages", "MessageSummary"), ("get_message", None, "MessageDetail"),
    ("wait_for_message", "message", "MessageDetail"), ("wait_for_delivery", "delivery", "Delivery"),
    ("send_message", None, "SendAccepted"),
    ("reply_to_message", None, "SendAccepted"), ("forward_message", None, "SendAccepted"),
    ("release_message", None, "SendAccepted"),
    ("list_threads", "threads", "Thread"), ("get_thread", None, "ThreadDetail"),
    ("create_domain", None, "Domain"), ("verify_domain", None, "Domain"), ("list_domains", "domains", "Domain"),
    ("create_sandbox", None, "SandboxPassword"), ("set_faults", "rules", "FaultRuleShown"),
]


def _shape_in(schema: dict, where: str | None) -> dict:
    if where is not None:
        prop = schema["properties"][where]
        ref = prop.get("items", prop)
        ref = next((choice for choice in ref.get("anyOf", [ref]) if "$ref" in choice), ref)
        schema = schema["$defs"][ref["$ref"].rsplit("/", 1)[1]]
    return schema


def test_each_tool_that_answers_a_resource_answers_the_apis_shape_of_it(components):
    tools = {tool.name: tool for tool in asyncio.run(build().list_tools())}
    for name, where, component in TOOL_SHAPES:
        output = tools[name].output_schema
        shape, api = _shape_in(output, where), components[component]
        assert list(shape["properties"]) == list(api["properties"]), (name, component)
        assert set(shape["required"]) == set(api["required"]), (name, component)
        for field, prop in api["properties"].items():
            assert _mcp_type(shape["properties"][field]) == _openapi_type(prop, components), (name, field)


def test_a_message_received_webhook_carries_the_apis_list_item(client_pro, box):
    owner = Account.objects.get(login="alice")
    Webhook.objects.create(owner=owner, url="http://127.0.0.1:9/hook", events=["message.received"], secret="whsec_dA==")
    message_id, = deliver(mail_corpus.plain(box["address"]), box["address"])
    item, = client_pro.get(f"/api/v1/mailboxes/{box['id']}/messages").json()["results"]
    data = WebhookDelivery.objects.get(event="message.received").payload["data"]
    assert item["id"] == message_id and data == item


def test_a_mailbox_webhook_carries_the_apis_mailbox_and_when_it_was_deleted(client_pro):
    owner = Account.objects.get(login="alice")
    Webhook.objects.create(owner=owner, url="http://127.0.0.1:9/hook", events=["mailbox.expired"], secret="whsec_dA==")
    box = create_mailbox(client_pro, name="Signup", tags=["a"], metadata={"run": 7})
    mailboxes_force_expire(mailbox_ids=[box["id"]])
    mailbox = client_pro.get(f"/api/v1/mailboxes/{box['id']}").json()
    data = WebhookDelivery.objects.get(event="mailbox.expired").payload["data"]["mailbox"]
    assert data == {**mailbox, "deleted_at": None}


def test_the_python_clients_types_are_those_of_relays_schema():
    spec = importlib.util.spec_from_file_location("python_types", ROOT / "scripts" / "python_types.py")
    python_types = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(python_types)
    fresh = python_types.generate(SchemaGenerator().get_schema(request=None, public=True))
    assert fresh == (ROOT / "client" / "relay_client" / "types.py").read_text(), (
        "client/relay_client/types.py is not what Relay's schema gives: run scripts/python-types.sh")
