"""Message.sender: a mail with no From header still says who sent it, by its envelope
sender, on every door (the API, a webhook's payload, the web inbox's list and message
page; MCP in tests/api/agents/test_mcp.py)."""
from inbox.views import _rows
from mailboxes.models import Mailbox, Message
from tests.helpers import deliver
from webhooks.events import _message_data


def test_a_mail_without_a_from_header_shows_its_envelope_sender_on_every_door(client_pro, box):
    [headerless] = deliver(b"\r\nYour code is 482913.\r\n", box["address"], mail_from="bounce@example.com")
    [with_header] = deliver(b"From: Ann <ann@example.com>\r\n\r\nHi\r\n", box["address"], mail_from="b@example.com")

    listed = client_pro.get(f"/api/v1/mailboxes/{box['id']}/messages").json()["results"]
    assert {item["id"]: item["from"] for item in listed} == {headerless: "bounce@example.com",
                                                             with_header: "Ann <ann@example.com>"}
    detail = client_pro.get(f"/api/v1/mailboxes/{box['id']}/messages/{headerless}").json()
    assert detail["from"] == "bounce@example.com" and detail["envelope_from"] == "bounce@example.com"
    assert _message_data(Message.objects.get(id=headerless))["from"] == "bounce@example.com"
    senders = {row["id"]: row["sender"] for row in _rows(Mailbox.objects.get(id=box["id"]))}
    assert senders[headerless] == "bounce@example.com"
