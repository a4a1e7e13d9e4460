"""What a send, a reply and a forward take, for every door (relay.outbox.outbound.
sending_checked): the values kept as each door keeps them, and the first wrong one named.
tests/api/agents/test_mcp.py checks the API and MCP answer with these words."""
import base64

import pytest

from mailboxes.errors import InvalidRequest
from relay.outbox.outbound import MAX_RECIPIENTS, Attachment, sending_checked


def test_values_are_kept_trimmed_and_attachments_decoded():
    checked = sending_checked({
        "to": [" a@example.com "], "cc": [], "subject": "  Hi ", "text": " hello\n", "html": "", "reply_to": "r@example.org",
        "attachments": [{"filename": " report.pdf ", "content_type": "Application/PDF",
                         "content_base64": base64.b64encode(b"%PDF").decode()}],
        "reply_all": True})
    assert checked == {"to": ["a@example.com"], "cc": [], "subject": "Hi", "text": "hello", "html": "",
                       "reply_to": "r@example.org",
                       "attachments": [Attachment(filename="report.pdf", content_type="application/pdf", content=b"%PDF")],
                       "reply_all": True}, "a value no rule covers is passed on as it is"


@pytest.mark.parametrize("arguments, field, words", [
    ({"to": []}, "to", "needs at least one address."),
    ({"cc": ["a@example.com"] * (MAX_RECIPIENTS + 1)}, "cc", f"takes at most {MAX_RECIPIENTS} addresses."),
    ({"bcc": ["a@example.com", '"quoted"@example.com']}, "bcc", "item 1: must be an email address"),
    ({"reply_to": 7}, "reply_to", "must be an email address"),
    ({"subject": "a\u2028b"}, "subject", "must be one line"),
    ({"subject": " "}, "subject", "may not be empty."),
    ({"text": "x" * 100_001}, "text", "takes at most 100000 characters."),
    ({"attachments": [{"filename": "a", "content_type": "message/rfc822", "content_base64": ""}]}, "attachments",
     "item 0: content_type: multipart/* and message/* cannot be attached."),
    ({"attachments": [{"filename": "a", "content_type": "text/plain", "content_base64": "not base64!"}]},
     "attachments", "item 0: content_base64: must be base64"),
])
def test_the_first_wrong_value_is_named(arguments, field, words):
    with pytest.raises(InvalidRequest) as refused:
        sending_checked({"to": ["a@example.com"], "subject": "Hi", "text": "x", **arguments})
    assert refused.value.field == field and refused.value.message.startswith(words), refused.value.message
