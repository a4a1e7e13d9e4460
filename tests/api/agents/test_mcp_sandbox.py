"""An agent sets up a sandbox for an app and its faults (docs/sandbox.md), through the
official MCP SDK's client against a real web process; the app submits with smtplib to the
submission port and meets the fault, then its mail is caught, found by its envelope
recipients and released to a real SMTP next hop."""
import smtplib

import pytest

from accounts.services import account_create_with_key
from relay.models import OutboxMail
from tests.api.agents.test_mcp import call, error_of, mcp_http, mcp_web, run  # noqa: F401 (fixtures)
from tests.conftest import SmtpServerThread
from tests.helpers import deliver
from tests.relay.inbound.test_submission import MAIL, no_auth_failures  # noqa: F401 (a fixture)
from tests.relay.outbox.test_delivery import next_hop, send_all_pending  # noqa: F401 (a fixture)

pytestmark = pytest.mark.workers


def test_an_agent_makes_a_sandbox_sets_a_fault_and_reads_the_catch(mcp_http, no_auth_failures):
    _, key = account_create_with_key(login="agent", plan="pro")
    submission = SmtpServerThread(submission=True).start()
    try:
        async def set_up():
            async with mcp_http.session(key) as session:
                sandbox = await call(session, "create_sandbox", {"ttl_minutes": 10})
                faults = await call(session, "set_faults", {"mailbox_id": sandbox["id"], "rules": [
                    {"stage": "rcpt", "code": 451, "times": 1}]})
                refused = await error_of(session, "set_faults", {"mailbox_id": sandbox["id"], "rules": [
                    {"stage": "rcpt", "code": 250}]})
                return sandbox, faults, refused

        sandbox, faults, refused = run(set_up())
        assert sandbox["sandbox"] is True and sandbox["smtp"]["username"] == sandbox["address"]
        assert faults["rules"][0]["remaining"] == 1 and refused.startswith("invalid_request")
        with smtplib.SMTP("127.0.0.1", submission.submission_port, timeout=10) as smtp:
            smtp.ehlo()
            smtp.user, smtp.password = sandbox["smtp"]["username"], sandbox["smtp"]["password"]
            smtp.auth("PLAIN", smtp.auth_plain)
            smtp.mail("app@staging.example")
            assert smtp.rcpt("alice@customer.example")[0] == 451
            assert smtp.rcpt("alice@customer.example")[0] == 250
            smtp.data(MAIL)

        async def read():
            async with mcp_http.session(key) as session:
                return await call(session, "list_messages", {"mailbox_id": sandbox["id"]})

        assert [message["subject"] for message in run(read())["messages"]] == ["Welcome"]
    finally:
        submission.stop()


def test_an_agent_finds_a_catch_by_its_envelope_recipient_and_releases_it_to_one_address(mcp_http, no_auth_failures,
                                                                                          next_hop):
    """list_messages, wait_for_message and wait_for_code take `rcpt` (a Bcc included), and
    release_message sends the catch on to the address named alone, behind its Resent-* block."""
    _, key = account_create_with_key(login="agent", plan="pro")
    submission = SmtpServerThread(submission=True).start()
    try:
        async def make():
            async with mcp_http.session(key) as session:
                return await call(session, "create_sandbox", {"ttl_minutes": 10})

        sandbox = run(make())
        with smtplib.SMTP("127.0.0.1", submission.submission_port, timeout=10) as smtp:
            smtp.ehlo()
            smtp.user, smtp.password = sandbox["smtp"]["username"], sandbox["smtp"]["password"]
            smtp.auth("PLAIN", smtp.auth_plain)
            smtp.sendmail("app@staging.example", ["alice@customer.example", "books@staging.example"], MAIL)
            smtp.sendmail("app@staging.example", ["bob@customer.example"],
                          MAIL.replace(b"Subject: Welcome", b"Subject: Your code is 731904"))

        async def find_and_release():
            async with mcp_http.session(key) as session:
                ids = {"mailbox_id": sandbox["id"]}
                found = {
                    "bcc": await call(session, "list_messages", {**ids, "rcpt": "Books@Staging.example"}),
                    "nobody": await call(session, "list_messages", {**ids, "rcpt": "carol@customer.example"}),
                    "waited": await call(session, "wait_for_message", {**ids, "rcpt": "bob@customer.example",
                                                                       "timeout_seconds": 5}),
                    "code": await call(session, "wait_for_code", {**ids, "rcpt": "bob@customer.example",
                                                                  "timeout_seconds": 5}),
                    "no_code": await call(session, "wait_for_code", {**ids, "rcpt": "alice@customer.example",
                                                                     "timeout_seconds": 1}),
                }
                [welcome] = found["bcc"]["messages"]
                released = await call(session, "release_message", {**ids, "message_id": welcome["id"],
                                                                    "to": ["qa@team.example"]})
                refused = {
                    "sent_copy": await error_of(session, "release_message", {
                        **ids, "message_id": released["message_id"], "to": ["qa@team.example"]}),
                    "bad_to": await error_of(session, "release_message", {**ids, "message_id": welcome["id"],
                                                                          "to": ["qa@team.example\r\nBcc: x@y.z"]}),
                    "no_to": await error_of(session, "release_message", {**ids, "message_id": welcome["id"],
                                                                         "to": []}),
                    "missing": await error_of(session, "release_message", {**ids, "message_id": welcome["id"] + 99,
                                                                           "to": ["qa@team.example"]}),
                }
                return found, welcome, released, refused

        found, welcome, released, refused = run(find_and_release())
        assert welcome["subject"] == "Welcome" and found["nobody"]["messages"] == []
        assert found["waited"]["message"]["envelope"]["rcpt_to"] == ["bob@customer.example"]
        assert found["code"]["code"] == "731904" and found["no_code"] == {"code": None}
        assert released["status"] == "queued" and set(released) == {"id", "status", "message_id"}
        assert refused["sent_copy"].startswith("conflict: ")
        assert refused["bad_to"].startswith("invalid_request: to: ")
        assert refused["no_to"].startswith("invalid_request: to: ")
        assert refused["missing"].startswith("not_found: ")

        send_all_pending()
        [envelope] = next_hop.received
        assert envelope.rcpt_tos == ["qa@team.example"]  # not Alice, nor the Bcc'd books
        assert envelope.original_content.startswith(f"Resent-From: {sandbox['address']}\r\n"
                                                    "Resent-To: qa@team.example\r\n".encode())
        assert envelope.original_content.endswith(b"\r\n" + MAIL)
    finally:
        submission.stop()


def test_an_anonymous_sandboxs_token_cannot_release_through_mcp(mcp_http, no_auth_failures):
    from rest_framework.test import APIClient

    from tests.helpers import create_mailbox

    sandbox = create_mailbox(APIClient(), sandbox=True)
    [message_id] = deliver(MAIL, sandbox["address"])

    async def scenario():
        async with mcp_http.session(sandbox["token"]) as session:
            return await error_of(session, "release_message", {"mailbox_id": sandbox["id"], "message_id": message_id,
                                                              "to": ["qa@team.example"]})

    assert run(scenario()).startswith("forbidden: ")
    assert not OutboxMail.objects.exists()
