"""An agent learns what became of the mail it sent (docs/delivery.md), through the official
MCP SDK's client against a real web process: a real worker and mailer send through a next
hop that takes the mail and then bounces it, as a smarthost does, back over Relay's own SMTP
server to the message's signed Return-Path."""
import asyncio
import smtplib
import time

import pytest
from aiosmtpd.controller import Controller

from accounts.services import account_create_with_key
from tests.api.agents.test_mcp import Http, call, error_of, run
from tests.helpers import answers, wait_until
from tests.ports import free_port
from tests.relay.outbox import bounce_corpus

pytestmark = pytest.mark.workers


class BouncingHop:
    """Takes every mail, and for each recipient whose local part is `nobody` returns a
    Postfix bounce to the envelope sender over Relay's SMTP before it answers the 250 (a
    smarthost that checks recipients after DATA); `later` is 451 every time."""

    def __init__(self, relay_smtp_port: int) -> None:
        self.relay_smtp_port = relay_smtp_port
        self.bounced: list[str] = []

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if address.startswith("later@"):
            return "451 4.3.0 try again later"
        envelope.rcpt_tos.append(address)
        return "250 2.1.5 OK"

    async def handle_DATA(self, server, session, envelope):
        for recipient in envelope.rcpt_tos:
            if recipient.startswith("nobody@"):
                await asyncio.get_running_loop().run_in_executor(None, self.bounce, envelope.mail_from, recipient)
        return "250 2.0.0 queued"

    def bounce(self, bounce_to: str, recipient: str) -> None:
        with smtplib.SMTP("127.0.0.1", self.relay_smtp_port, timeout=10) as smtp:
            smtp.sendmail("<>", [bounce_to], bounce_corpus.postfix(bounce_to, recipient))
        self.bounced.append(recipient)


@pytest.fixture
def agent_stack(processes, smtp_server):
    hop = BouncingHop(smtp_server.port)
    controller = Controller(hop, hostname="127.0.0.1", port=free_port())
    controller.start()
    processes.env["EMAIL_URL"] = f"smtp://127.0.0.1:{controller.port}"
    # Retries' delays are jittered (Celery's backoff): with the suite's 1 s base, three could
    # all come at once. Fifty cannot, so a recipient deferred every time stays deferred.
    processes.env["RELAY_SEND_MAX_RETRIES"] = "50"
    processes.worker("sender")
    processes.mailer("mailer")
    base = processes.start_web()
    wait_until(lambda: answers(f"{base}/mcp", method="POST", status=401), timeout=30, message="/mcp to answer")
    yield Http(f"{base}/mcp"), hop
    controller.stop()


def test_an_agent_sends_to_an_address_that_does_not_exist_and_one_call_says_it_bounced(agent_stack):
    mcp, hop = agent_stack
    _, key = account_create_with_key(login="agent", plan="pro")

    async def scenario():
        async with mcp.session(key) as session:
            box = await call(session, "create_mailbox", {"local_part": "agent"})
            sent = await call(session, "send_message", {
                "mailbox_id": box["id"], "to": ["nobody@example.net", "ana@example.net"], "subject": "Hello",
                "text": "Are you there?"})
            started = time.monotonic()
            waited = await call(session, "wait_for_delivery", {
                "mailbox_id": box["id"], "message_id": sent["message_id"], "timeout_seconds": 60})
            elapsed = time.monotonic() - started
            shown = await call(session, "get_message", {"mailbox_id": box["id"], "message_id": sent["message_id"]})
            not_sent = await error_of(session, "wait_for_delivery", {
                "mailbox_id": box["id"], "message_id": sent["message_id"] + 10_000, "timeout_seconds": 1})
            return waited, elapsed, shown, not_sent

    waited, elapsed, shown, not_sent = run(scenario())
    assert waited["final"] is True, waited
    by_recipient = {row["recipient"]: row for row in waited["delivery"]}
    assert by_recipient["nobody@example.net"]["status"] == "bounced"
    assert by_recipient["nobody@example.net"]["smtp_code"] == 550
    assert "User unknown" in by_recipient["nobody@example.net"]["detail"]
    assert by_recipient["ana@example.net"]["status"] == "sent"
    assert elapsed < 55, f"the wait ran out instead of ending when the bounce came ({elapsed:.1f} s)"
    assert hop.bounced == ["nobody@example.net"]
    assert [row["status"] for row in shown["delivery"]] == [by_recipient[row["recipient"]]["status"]
                                                            for row in shown["delivery"]]
    assert not_sent.startswith("not_found")


def test_a_wait_that_runs_out_returns_what_is_known_and_mail_received_has_no_delivery(agent_stack, smtp_server):
    mcp, _ = agent_stack
    _, key = account_create_with_key(login="agent", plan="pro")

    async def scenario():
        async with mcp.session(key) as session:
            box = await call(session, "create_mailbox", {"local_part": "patient"})
            # Deferred every time, with fifty retries to spend: it cannot be final within 2 s.
            sent = await call(session, "send_message", {"mailbox_id": box["id"], "to": ["later@example.net"],
                                                        "subject": "Hello", "text": "Later?"})
            waited = await call(session, "wait_for_delivery", {
                "mailbox_id": box["id"], "message_id": sent["message_id"], "timeout_seconds": 2})
            with smtplib.SMTP("127.0.0.1", smtp_server.port, timeout=10) as smtp:
                smtp.sendmail("someone@example.org", [box["address"]], b"Subject: hi\r\n\r\nhello\r\n")
            listed = await call(session, "list_messages", {"mailbox_id": box["id"], "direction": "in"})
            received = await error_of(session, "wait_for_delivery", {
                "mailbox_id": box["id"], "message_id": listed["messages"][0]["id"], "timeout_seconds": 1})
            return waited, received

    waited, received = run(scenario())
    assert waited["final"] is False
    assert [row["recipient"] for row in waited["delivery"]] == ["later@example.net"]
    assert waited["delivery"][0]["status"] in ("queued", "deferred")
    assert received.startswith("not_found") and "received" in received
