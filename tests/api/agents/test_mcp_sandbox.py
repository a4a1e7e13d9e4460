"""An agent sets up a sandbox for an app and its faults (docs/sandbox.md), through the
official MCP SDK's client against a real web process; the app submits with smtplib to the
submission port and meets the fault, then its mail is caught."""
import smtplib

import pytest

from accounts.services import account_create_with_key
from tests.api.agents.test_mcp import call, error_of, mcp_http, mcp_web, run  # noqa: F401 (fixtures)
from tests.conftest import SmtpServerThread
from tests.relay.inbound.test_submission import MAIL, no_auth_failures  # noqa: F401 (a fixture)

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
