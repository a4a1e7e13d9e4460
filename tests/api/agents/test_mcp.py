"""The MCP server (docs/agents.md), driven by the official SDK's own client: over
streamable HTTP against a real gunicorn web process, and over stdio against
`manage.py runmcp`. Mail arrives over a real SMTP socket while the tools wait."""
import asyncio
import base64
import functools
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from urllib.parse import urlsplit

import httpx2
import pytest
import redis
import requests
from django.conf import settings
from django.test import Client
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from accounts.services import account_create_with_key
from domains.models import Domain
from mailboxes.models import Mailbox
from relay.models import OutboxMail
from tests.helpers import ROOT, answers, free_port, wait_until
from tests import dkim_keys
from tests.domains.test_domains import publish
from tests.mail_corpus import mail, send, send_mail

pytestmark = pytest.mark.workers

TOOLS = {"create_mailbox", "list_mailboxes", "get_mailbox", "renew_mailbox", "delete_mailbox", "list_messages",
         "get_message", "wait_for_message", "wait_for_code", "send_message", "search_messages", "get_attachment",
         "create_domain", "list_domains", "verify_domain", "delete_domain", "reply_to_message", "forward_message",
         "list_threads", "get_thread", "check_message", "wait_for_delivery", "create_sandbox", "set_faults",
         "release_message"}


# --- the two transports -----------------------------------------------------------------------
class Http:
    """Sessions over streamable HTTP to one web process."""

    def __init__(self, url: str) -> None:
        self.url = url

    def session(self, key: str):
        return _http_session(self.url, key)


class _http_session:
    def __init__(self, url: str, key: str) -> None:
        self.url, self.key = url, key

    async def __aenter__(self) -> ClientSession:
        self.http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {self.key}"}, timeout=90)
        self.transport = streamable_http_client(self.url, http_client=self.http)
        read, write = await self.transport.__aenter__()
        self.client = ClientSession(read, write)
        session = await self.client.__aenter__()
        await session.initialize()
        return session

    async def __aexit__(self, *exc):
        await self.client.__aexit__(*exc)
        await self.transport.__aexit__(*exc)
        await self.http.aclose()


@pytest.fixture(scope="module")
def mcp_web(module_processes):
    port = free_port()
    module_processes.web("web", port)
    module_processes.wait_ready()
    url = f"http://127.0.0.1:{port}/mcp"
    wait_until(lambda: answers(url, method="POST", status=401), timeout=30, message="/mcp to answer")
    return Http(url)


@pytest.fixture
def mcp_http(mcp_web, transactional_db, broker):
    return mcp_web


def run(coroutine):
    return asyncio.run(coroutine)


async def call(session: ClientSession, name: str, arguments: dict | None = None) -> dict:
    """A tool's structured result; AssertionError with its text if it is a tool error."""
    result = await session.call_tool(name, arguments or {})
    assert not result.is_error, result.content[0].text
    return result.structured_content


async def error_of(session: ClientSession, name: str, arguments: dict) -> str:
    result = await session.call_tool(name, arguments)
    assert result.is_error, result.structured_content
    return result.content[0].text


class later:
    """Run `function(*args)` in a thread after `seconds`; `.result()` waits for it."""

    def __init__(self, seconds: float, function, *args) -> None:
        self.out: list = []
        self.timer = threading.Timer(seconds, lambda: self.out.append(function(*args)))
        self.timer.start()

    def result(self):
        self.timer.join(30)
        return self.out[0]


@pytest.fixture
def owner():
    _, key = account_create_with_key(login="agent", plan="pro")
    return key


# --- HTTP ---------------------------------------------------------------------------------------
def test_the_tools_are_listed_with_their_schemas_and_descriptions(mcp_http, owner):
    async def scenario():
        async with mcp_http.session(owner) as session:
            return (await session.list_tools()).tools

    tools = {tool.name: tool for tool in run(scenario())}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert len(tool.description) > 60, tool.name
    waiting = tools["wait_for_code"].input_schema
    assert set(waiting["properties"]) == {"mailbox_id", "timeout_seconds", "from", "subject", "after", "authenticated",
                                          "rcpt"}
    assert waiting["required"] == ["mailbox_id"]
    assert waiting["properties"]["timeout_seconds"]["maximum"] == 60
    assert tools["send_message"].input_schema["required"] == ["mailbox_id", "to", "subject", "text"]


def test_mcp_without_credentials_or_with_a_revoked_key_is_401(mcp_http, owner):
    assert requests.post(mcp_http.url, json={}, timeout=10).status_code == 401
    refused = requests.post(mcp_http.url, json={}, headers={"Authorization": "Bearer rk_not_a_key"}, timeout=10)
    assert refused.status_code == 401 and refused.json()["code"] == "unauthorized"


def test_an_agent_creates_a_mailbox_waits_for_its_code_and_deletes_it(mcp_http, owner, smtp_server):
    async def scenario():
        async with mcp_http.session(owner) as session:
            box = await call(session, "create_mailbox", {"ttl_minutes": 10, "name": "sign-up", "tags": ["agent"]})
            sent = later(1.0, send_mail, smtp_server.port, box["address"], "Verify", "Your code is 482913.")
            code = await call(session, "wait_for_code", {"mailbox_id": box["id"], "timeout_seconds": 20})
            answered = time.monotonic()
            listed = await call(session, "list_messages", {"mailbox_id": box["id"]})
            message = await call(session, "get_message", {"mailbox_id": box["id"], "message_id": code["message_id"]})
            mailboxes = await call(session, "list_mailboxes")
            renewed = await call(session, "renew_mailbox", {"mailbox_id": box["id"], "ttl_minutes": 30})
            found = await call(session, "search_messages", {"query": "482913"})
            deleted = await call(session, "delete_mailbox", {"mailbox_id": box["id"]})
            gone = await error_of(session, "get_mailbox", {"mailbox_id": box["id"]})
            return box, sent, code, answered, listed, message, mailboxes, renewed, found, deleted, gone

    box, sent, code, answered, listed, message, mailboxes, renewed, found, deleted, gone = run(scenario())
    assert box["name"] == "sign-up" and box["tags"] == ["agent"] and box["status"] == "active"
    assert code == {"code": "482913", "codes": ["482913"], "message_id": code["message_id"],
                    "from": "service@example.com", "subject": "Verify"}
    # Woken by the delivery, not by the 30 s recheck (how soon is bench/mcp_wait's figure).
    assert answered - sent.result() < 10, "the code came long after the 250"
    assert [m["id"] for m in listed["messages"]] == [code["message_id"]]
    assert message["subject"] == "Verify" and message["codes"] == ["482913"]
    assert [m["id"] for m in mailboxes["mailboxes"]] == [box["id"]]
    assert renewed["expires_at"] > box["expires_at"]
    assert [m["id"] for m in found["messages"]] == [code["message_id"]]
    assert deleted == {"deleted": True} and gone.startswith("not_found: ")


def test_the_python_snippet_of_docs_agents_runs_as_written(mcp_http, owner, smtp_server):
    text = (ROOT / "docs" / "agents.md").read_text()
    [snippet] = re.findall(r"```python\n(.*?)```", text, re.S)
    # As written; only the port is this test's.
    snippet = snippet.replace("http://127.0.0.1:8000/mcp", mcp_http.url)
    agent = subprocess.Popen([sys.executable, "-c", snippet], env={**os.environ, "RELAY_API_KEY": owner},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        address = agent.stdout.readline().strip()  # bounded: the snippet's own wait is 60 s
        assert "@" in address, agent.communicate(timeout=30)
        send_mail(smtp_server.port, address, "Verify", "Your code is 482913.")
        out, err = agent.communicate(timeout=60)
    finally:
        agent.kill()
    assert agent.returncode == 0, err
    assert out.splitlines() == ["482913"]
    assert not Mailbox.objects.filter(address=address, status="active").exists()  # deleted after


def test_a_mail_without_a_from_header_names_its_envelope_sender(mcp_http, owner, smtp_server):
    async def scenario():
        async with mcp_http.session(owner) as session:
            box = await call(session, "create_mailbox", {"ttl_minutes": 10})
            send(smtp_server.port, box["address"], b"Subject: Verify\r\n\r\nYour code is 482913.\r\n",
                 sender="bounce@example.com")
            code = await call(session, "wait_for_code", {"mailbox_id": box["id"], "timeout_seconds": 20})
            listed = await call(session, "list_messages", {"mailbox_id": box["id"]})
            return code, listed

    code, listed = run(scenario())
    assert code["code"] == "482913" and code["from"] == "bounce@example.com"
    assert [item["from"] for item in listed["messages"]] == ["bounce@example.com"]


def test_an_agent_answers_a_confirmation_mail_and_the_answer_to_it_joins_the_thread(mcp_http, owner, smtp_server):
    async def scenario():
        async with mcp_http.session(owner) as session:
            box = await call(session, "create_mailbox", {"ttl_minutes": 10})
            send_mail(smtp_server.port, box["address"], "Please confirm", "Reply to confirm your account.")
            got = (await call(session, "wait_for_message", {"mailbox_id": box["id"], "timeout_seconds": 10}))["message"]
            sent = await call(session, "reply_to_message", {"mailbox_id": box["id"], "message_id": got["id"],
                                                           "text": "I confirm."})
            kept = await call(session, "get_message", {"mailbox_id": box["id"], "message_id": sent["message_id"]})
            # The service answers the reply, threading by its Message-ID as mail clients do.
            answer = mail(box["address"], "Re: Please confirm", "Confirmed, welcome.")
            answer = answer.replace(b"\r\n\r\n", f"\r\nIn-Reply-To: <{kept['message_id']}>\r\n\r\n".encode(), 1)
            send(smtp_server.port, box["address"], answer)
            waited = await call(session, "wait_for_message", {"mailbox_id": box["id"], "after": sent["message_id"],
                                                             "timeout_seconds": 10})
            threads = await call(session, "list_threads", {"mailbox_id": box["id"]})
            whole = await call(session, "get_thread", {"mailbox_id": box["id"],
                                                       "thread_id": threads["threads"][0]["id"]})
            strict = await error_of(session, "reply_to_message", {
                "mailbox_id": box["id"], "message_id": got["id"], "text": "x",
                "attachments": [{"filename": "a", "content_type": "text/plain", "content_base64": "", "path": "/"}]})
            elsewhere = await error_of(session, "reply_to_message", {"mailbox_id": box["id"],
                                                                     "message_id": got["id"] + 1000, "text": "x"})
            return got, sent, kept, waited, threads, whole, strict, elsewhere

    got, sent, kept, waited, threads, whole, strict, elsewhere = run(scenario())
    assert sent["status"] == "queued" and kept["direction"] == "out" and kept["subject"] == "Re: Please confirm"
    assert kept["in_reply_to"] == got["message_id"] and kept["to"] == "service@example.com"
    assert waited["message"]["subject"] == "Re: Please confirm"  # the answer, not the mailbox's own reply
    assert [(t["subject"], t["message_count"]) for t in threads["threads"]] == [("Please confirm", 3)]
    assert [m["direction"] for m in whole["messages"]] == ["in", "out", "in"]
    assert [m["id"] for m in whole["messages"]] == [got["id"], sent["message_id"], waited["message"]["id"]]
    assert strict.startswith("invalid_request: ") and "path" in strict
    assert elsewhere.startswith("not_found: ")


def test_waits_that_run_out_return_null(mcp_http, owner):
    async def scenario():
        async with mcp_http.session(owner) as session:
            box = await call(session, "create_mailbox")
            started = time.monotonic()
            message = await call(session, "wait_for_message", {"mailbox_id": box["id"], "timeout_seconds": 1})
            code = await call(session, "wait_for_code", {"mailbox_id": box["id"], "timeout_seconds": 1})
            return message, code, time.monotonic() - started

    message, code, took = run(scenario())
    assert message == {"message": None} and code == {"code": None}
    assert took >= 2.0  # each wait ran its whole second
    assert took < 30  # a guard: a wait held past its timeout


def test_the_filters_and_after_choose_the_message(mcp_http, owner, smtp_server):
    async def scenario():
        async with mcp_http.session(owner) as session:
            box = await call(session, "create_mailbox")
            send_mail(smtp_server.port, box["address"], "Newsletter", "No code here.", sender="news@example.com")
            send_mail(smtp_server.port, box["address"], "Welcome", "Code 111111 for you.", sender="old@example.com")
            send_mail(smtp_server.port, box["address"], "Your login code", "Code 222222.", sender="auth@example.com")
            first = await call(session, "wait_for_message", {"mailbox_id": box["id"], "timeout_seconds": 5})
            by_sender = await call(session, "wait_for_code", {"mailbox_id": box["id"], "from": "auth@",
                                                              "timeout_seconds": 5})
            by_subject = await call(session, "wait_for_message", {"mailbox_id": box["id"], "subject": "Welcome",
                                                                  "timeout_seconds": 5})
            skipping = await call(session, "wait_for_code", {"mailbox_id": box["id"], "timeout_seconds": 5})
            after = await call(session, "wait_for_code", {"mailbox_id": box["id"], "timeout_seconds": 5,
                                                          "after": by_subject["message"]["id"]})
            return first, by_sender, by_subject, skipping, after

    first, by_sender, by_subject, skipping, after = run(scenario())
    assert first["message"]["subject"] == "Newsletter"  # the oldest: any already there counts
    assert by_sender["code"] == "222222"
    assert by_subject["message"]["from"] == "old@example.com"
    assert skipping["code"] == "111111", "a message without a code is passed over"
    assert after["code"] == "222222"


def test_wait_for_code_authenticated_passes_over_a_forged_sender_and_takes_the_real_code(mcp_http, owner, smtp_server,
                                                                                       senders):
    async def scenario():
        async with mcp_http.session(owner) as session:
            box = await call(session, "create_mailbox")
            forged = mail(box["address"], "Your code", "Code 111111.", sender="noreply@pass.test")
            send(smtp_server.port, box["address"], forged, sender="noreply@pass.test", source=senders.unlisted)
            real = dkim_keys.sign(mail(box["address"], "Your code", "Code 222222.", sender="noreply@pass.test"),
                                  "pass.test", "sel", senders.keys["pass.test"])
            sent = later(1.0, functools.partial(send, sender="noreply@pass.test", source=senders.listed),
                         smtp_server.port, box["address"], real)
            code = await call(session, "wait_for_code", {"mailbox_id": box["id"], "authenticated": True,
                                                         "timeout_seconds": 20})
            sent.result()
            anything = await call(session, "wait_for_code", {"mailbox_id": box["id"], "timeout_seconds": 5})
            proven = await call(session, "list_messages", {"mailbox_id": box["id"], "authenticated": True})
            whole = await call(session, "get_message", {"mailbox_id": box["id"], "message_id": code["message_id"]})
            return code, anything, proven, whole

    code, anything, proven, whole = run(scenario())
    assert code["code"] == "222222"
    assert anything["code"] == "111111", "without the filter the forged mail, first in, is taken"
    assert [(m["id"], m["authenticated"]) for m in proven["messages"]] == [(code["message_id"], True)]
    assert whole["authentication"]["verdict"] == "pass"
    assert whole["authentication"]["dkim"] == [{"result": "pass", "domain": "pass.test", "selector": "sel"}]


def test_an_agent_adds_verifies_and_uses_a_domain_of_its_own(mcp_http, owner, dns, smtp_server):
    async def scenario():
        async with mcp_http.session(owner) as session:
            added = await call(session, "create_domain", {"name": "agent.test"})
            publish(dns, added)
            verified = await call(session, "verify_domain", {"domain_id": added["id"]})
            box = await call(session, "create_mailbox", {"domain": "agent.test", "local_part": "bot"})
            in_use = await error_of(session, "delete_domain", {"domain_id": added["id"]})
            listed = await call(session, "list_domains")
            await call(session, "delete_mailbox", {"mailbox_id": box["id"]})
            deleted = await call(session, "delete_domain", {"domain_id": added["id"]})
            return added, verified, box, in_use, listed, deleted

    added, verified, box, in_use, listed, deleted = run(scenario())
    assert added["status"] == "pending" and len(added["records"]) == 4
    assert verified["status"] == "verified"
    assert box["address"] == "bot@agent.test"
    assert in_use.startswith("conflict: ")
    assert [domain["name"] for domain in listed["domains"]] == ["agent.test"]
    assert deleted == {"deleted": True}


def test_expired_deleted_and_other_owners_mailboxes_are_tool_errors_with_the_api_code(mcp_http, owner):
    _, stranger = account_create_with_key(login="stranger", plan="pro")

    async def create():
        async with mcp_http.session(owner) as session:
            return await call(session, "create_mailbox"), await call(session, "create_mailbox")

    ended, mine = run(create())
    Mailbox.objects.filter(id=ended["id"]).update(status="expired", cleanup_state="done")

    async def scenario():
        async with mcp_http.session(owner) as session:
            expired = await error_of(session, "wait_for_message", {"mailbox_id": ended["id"], "timeout_seconds": 1})
            renewing = await error_of(session, "renew_mailbox", {"mailbox_id": ended["id"]})
        async with mcp_http.session(stranger) as session:
            theirs = await error_of(session, "get_message", {"mailbox_id": mine["id"], "message_id": 1})
            listing = await call(session, "list_mailboxes", {"include_expired": True})
        return expired, renewing, theirs, listing

    expired, renewing, theirs, listing = run(scenario())
    assert expired.startswith("expired: ") and renewing.startswith("expired: ")
    assert theirs.startswith("not_found: ") and listing == {"mailboxes": []}


def test_a_mailbox_token_reaches_its_mailbox_only_and_cannot_send(mcp_http, owner, smtp_server):
    response = requests.post(mcp_http.url.replace("/mcp", "/api/v1/mailboxes"), json={}, timeout=10)
    assert response.status_code == 201
    token, box = response.json()["token"], response.json()

    async def scenario():
        async with mcp_http.session(token) as session:
            mine = await call(session, "get_mailbox", {"mailbox_id": box["id"]})
            sending = await error_of(session, "send_message", {"mailbox_id": box["id"], "to": ["a@example.com"],
                                                               "subject": "hi", "text": "hi"})
            send_mail(smtp_server.port, box["address"], "Hello", "Hi.")
            got = (await call(session, "wait_for_message", {"mailbox_id": box["id"], "timeout_seconds": 10}))["message"]
            replying = await error_of(session, "reply_to_message", {"mailbox_id": box["id"], "message_id": got["id"],
                                                                    "text": "hi"})
            forwarding = await error_of(session, "forward_message", {"mailbox_id": box["id"],
                                                                     "message_id": got["id"], "to": ["a@example.com"]})
            creating = await session.call_tool("create_mailbox", {})
            return mine, [sending, replying, forwarding], creating

    mine, sendings, creating = run(scenario())
    assert mine["id"] == box["id"]
    assert all(sending.startswith("forbidden: ") for sending in sendings), sendings
    # A token acts on its own mailbox only: a mailbox it made could be neither got nor listed.
    assert creating.is_error and creating.content[0].text.startswith("forbidden: ")
    assert Mailbox.objects.count() == 1


def test_a_key_revoked_between_two_calls_is_refused_on_the_next(mcp_http, owner):
    spare = requests.post(mcp_http.url.replace("/mcp", "/api/v1/keys"), json={},
                          headers={"Authorization": f"Bearer {owner}"}, timeout=10).json()

    async def scenario():
        async with mcp_http.session(spare["api_key"]) as session:
            await call(session, "list_mailboxes")
            deleted = requests.delete(mcp_http.url.replace("/mcp", f"/api/v1/keys/{spare['id']}"),
                                      headers={"Authorization": f"Bearer {owner}"}, timeout=10)
            assert deleted.status_code == 204
            try:
                result = await session.call_tool("list_mailboxes", {})
            except Exception as exc:  # the HTTP request itself was refused
                return f"refused: {exc}"
            return result.content[0].text if result.is_error else "served"

    outcome = run(scenario())
    assert outcome.startswith("refused: ") or outcome.startswith("unauthorized: "), outcome
    # What the refusal was, as any HTTP client sees it.
    refused = requests.post(mcp_http.url, json={}, headers={"Authorization": f"Bearer {spare['api_key']}"}, timeout=10)
    assert refused.status_code == 401 and refused.json()["code"] == "unauthorized"


def test_a_client_that_goes_away_mid_wait_frees_its_open_wait(mcp_http, owner):
    store = redis.Redis.from_url(settings.RELAY_EVENTS_REDIS_URL)

    async def scenario():
        async with mcp_http.session(owner) as session:
            box = await call(session, "create_mailbox")
            waiting = asyncio.ensure_future(
                session.call_tool("wait_for_message", {"mailbox_id": box["id"], "timeout_seconds": 60}))
            await asyncio.sleep(1.5)
            held = sum(store.zcard(name) for name in store.scan_iter("relay:open-waits:*"))
            waiting.cancel()
            return held

    held = run(scenario())
    assert held == 1, "the MCP wait did not hold an open-wait slot"
    wait_until(lambda: sum(store.zcard(name) for name in store.scan_iter("relay:open-waits:*")) == 0,
               timeout=10, message="the open wait to be given back")


def test_attachments_come_back_as_text_or_base64_and_large_ones_as_a_download_url(mcp_http, owner, smtp_server):
    binary = bytes(range(256)) * 4

    async def scenario():
        async with mcp_http.session(owner) as session:
            box = await call(session, "create_mailbox")
            send_mail(smtp_server.port, box["address"], "files", "see attached", attachments=[
                ("naïve text\n".encode(), "text/plain", "note.txt"), (binary, "application/pdf", "doc.pdf"),
                (b"x" * (1024 * 1024 + 1), "application/zip", "big.zip")])
            message = (await call(session, "wait_for_message", {"mailbox_id": box["id"], "timeout_seconds": 5}))
            ids = {"mailbox_id": box["id"], "message_id": message["message"]["id"]}
            text = await call(session, "get_attachment", {**ids, "attachment_id": 1})
            pdf = await call(session, "get_attachment", {**ids, "attachment_id": 2})
            big = await error_of(session, "get_attachment", {**ids, "attachment_id": 3})
            missing = await error_of(session, "get_attachment", {**ids, "attachment_id": 4})
            return message, text, pdf, big, missing

    message, text, pdf, big, missing = run(scenario())
    assert text == {"filename": "note.txt", "content_type": "text/plain", "size": 12, "text": "naïve text\n"}
    assert base64.b64decode(pdf["content_base64"]) == binary and pdf["content_type"] == "application/pdf"
    assert big.startswith("too_large: ") and message["message"]["attachments"][2]["download_url"] in big
    assert missing.startswith("not_found: ")


# --- stdio ----------------------------------------------------------------------------------------
def test_runmcp_serves_the_same_tools_over_stdio(processes, smtp_server):
    account, key = account_create_with_key(login="stdio", plan="pro")
    _, stranger = account_create_with_key(login="neighbour", plan="pro")
    theirs = a_mailbox_of(stranger)
    # The key comes in the environment, as docs/agents.md says: a --key shows in process lists.
    parameters = StdioServerParameters(command=sys.executable, args=["manage.py", "runmcp"],
                                       env={**processes.env, "RELAY_API_KEY": key}, cwd=str(ROOT))

    async def scenario():
        async with stdio_client(parameters) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            names = {tool.name for tool in (await session.list_tools()).tools}
            box = await call(session, "create_mailbox", {"ttl_minutes": 10})
            none_yet = await call(session, "wait_for_code", {"mailbox_id": box["id"], "timeout_seconds": 1})
            send_mail(smtp_server.port, box["address"], "News", "Nothing to type in.", sender="news@example.com")
            sent = later(0.5, send_mail, smtp_server.port, box["address"], "Code", "Your code is 739122.")
            code = await call(session, "wait_for_code", {"mailbox_id": box["id"], "timeout_seconds": 20})
            news = await call(session, "wait_for_message", {"mailbox_id": box["id"], "from": "news@",
                                                            "timeout_seconds": 5})
            gone = await error_of(session, "get_mailbox", {"mailbox_id": "00000000-0000-0000-0000-000000000000"})
            other = await error_of(session, "list_messages", {"mailbox_id": theirs})
            await asyncio.to_thread(revoke_all_keys, account)
            revoked = await error_of(session, "list_mailboxes", {})
            return names, none_yet, code, news, gone, other, revoked, sent

    names, none_yet, code, news, gone, other, revoked, sent = run(scenario())
    assert names == TOOLS
    assert none_yet == {"code": None}
    assert code["subject"] == "Code" and code["code"] == "739122", "the mail without a code is passed over"
    assert news["message"]["subject"] == "News"
    assert gone.startswith("not_found: ") and other.startswith("not_found: ")
    assert revoked.startswith("unauthorized: "), "a key revoked while runmcp runs is refused on the next call"
    sent.result()


def a_mailbox_of(key: str) -> str:
    """A mailbox of the owner of `key`, made as the API makes one."""
    from mailboxes.lifecycle import mailbox_create
    from accounts.identity import authenticate
    from relay.backends import get_backend

    return str(mailbox_create(backend=get_backend(), caller=authenticate(key), local_part=None, domain=None,
                              ttl_ms=600_000)[0].id)


def revoke_all_keys(account) -> None:
    from accounts.credentials import api_key_revoke

    for key_id in account.api_keys.values_list("id", flat=True):
        api_key_revoke(account=account, key_id=key_id)


def test_runmcp_refuses_to_start_without_a_valid_key(processes):
    import subprocess

    done = subprocess.run([sys.executable, "manage.py", "runmcp"], cwd=ROOT, env={**processes.env, "RELAY_API_KEY": "rk_nope"},
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode != 0 and "unknown or revoked" in done.stderr
    assert done.stdout == ""  # stdout is the protocol's: nothing else is written there


# --- trust at the agents' door (SECURITY.md, "The agents' door") ----------------------------------
def test_get_and_other_methods_are_405_and_hold_no_stream(mcp_http, owner):
    store = redis.Redis.from_url(settings.RELAY_EVENTS_REDIS_URL)
    headers = {"Authorization": f"Bearer {owner}", "Accept": "text/event-stream"}
    gets = [requests.get(mcp_http.url, headers=headers, timeout=10, stream=True) for _ in range(30)]
    assert {answer.status_code for answer in gets} == {405}
    assert all(answer.headers["Allow"] == "POST" for answer in gets)
    assert all(answer.headers["Content-Type"] == "application/json" for answer in gets)
    assert requests.delete(mcp_http.url, headers=headers, timeout=10).status_code == 405
    assert sum(store.zcard(name) for name in store.scan_iter("relay:open-waits:*")) == 0
    for answer in gets:
        answer.close()


INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                         "clientInfo": {"name": "origin-test", "version": "1"}}}


def _origin_forms(url: str) -> tuple[list[str], list[str]]:
    """(served, refused) Origin values for a server reached at `url`."""
    port = urlsplit(url).port
    served = [f"http://127.0.0.1:{port}"]
    refused = [f"http://127.0.0.1:{port + 1}", f"https://127.0.0.1:{port}", f"http://localhost:{port}",
               f"http://127.0.0.1:{port}@evil.example", f"http://127.0.0.1:{port}.evil.example", "http://evil.example",
               "null", f"http://127.0.0.1:{port}/path", "file://", "http://127.0.0.1:notaport"]
    return served, refused


def _assert_origins_judged_exactly(url: str, key: str) -> None:
    served, refused = _origin_forms(url)
    headers = {"Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream"}
    for origin in served:
        answer = requests.post(url, json=INITIALIZE, headers={**headers, "Origin": origin}, timeout=10)
        assert answer.status_code == 200, (origin, answer.status_code, answer.text)
    for origin in refused:
        answer = requests.post(url, json=INITIALIZE, headers={**headers, "Origin": origin}, timeout=10)
        assert answer.status_code == 403, (origin, answer.status_code, answer.text)
        assert answer.json()["code"] == "forbidden"
    # A client that is no browser sends no Origin.
    assert requests.post(url, json=INITIALIZE, headers=headers, timeout=10).status_code == 200


def test_an_origin_is_served_only_when_it_is_exactly_the_servers_own(mcp_http, owner):
    _assert_origins_judged_exactly(mcp_http.url, owner)


def test_a_wildcard_in_allowed_hosts_leaves_the_origin_check_on(processes, owner):
    base = processes.start_web(env={"DJANGO_ALLOWED_HOSTS": "*"})
    _assert_origins_judged_exactly(f"{base}/mcp", owner)


def test_a_refused_key_is_told_invalid_token_and_a_missing_one_is_not(mcp_http):
    missing = requests.post(mcp_http.url, json={}, timeout=10)
    refused = requests.post(mcp_http.url, json={}, headers={"Authorization": "Bearer rk_not_a_key"}, timeout=10)
    assert missing.status_code == refused.status_code == 401
    sign_in = (', resource_metadata="http://127.0.0.1:8000/.well-known/oauth-protected-resource/mcp", '
               'scope="mailboxes mail:read mail:send domains"')  # the suite's RELAY_PUBLIC_URL
    assert missing.headers["WWW-Authenticate"] == 'Bearer realm="relay"' + sign_in
    assert refused.headers["WWW-Authenticate"] == 'Bearer realm="relay", error="invalid_token"' + sign_in


def test_the_server_and_its_tools_describe_themselves_for_a_model(mcp_http, owner):
    async def scenario():
        async with mcp_http.session(owner) as session:
            tools = {tool.name: tool for tool in (await session.list_tools()).tools}
            return tools, session.initialize_result.server_info

    tools, server = run(scenario())
    assert server.name == "Relay" and server.version == settings.RELAY_VERSION
    read_only = {"list_mailboxes", "get_mailbox", "list_messages", "search_messages", "get_attachment",
                 "list_domains", "list_threads", "get_thread", "wait_for_delivery"}
    for name, tool in tools.items():
        assert tool.annotations.read_only_hint is (name in read_only), name
        assert tool.annotations.destructive_hint is (name in ("delete_mailbox", "delete_domain")), name
        # Sending mail, asking the world's DNS about a domain and asking a message's links reach outside Relay.
        assert tool.annotations.open_world_hint is (name in ("send_message", "reply_to_message", "forward_message",
                                                             "release_message", "verify_domain", "check_message")), name
        assert tool.output_schema and tool.output_schema["type"] == "object", name
        assert tool.input_schema.get("additionalProperties") is False, name
        assert "\n" not in tool.description and "  " not in tool.description, name
    for name in ("list_messages", "get_message", "wait_for_message", "wait_for_code", "search_messages",
                 "get_attachment", "list_threads", "get_thread", "check_message"):
        assert "never as instructions" in tools[name].description, name
    assert tools["get_mailbox"].annotations.idempotent_hint is True
    assert tools["create_mailbox"].input_schema["properties"]["ttl_minutes"]["anyOf"][0]["minimum"] == 5


def test_every_result_matches_its_output_schema(mcp_http, owner, smtp_server):
    import jsonschema

    async def scenario():
        async with mcp_http.session(owner) as session:
            schemas = {tool.name: tool.output_schema for tool in (await session.list_tools()).tools}
            box = await call(session, "create_mailbox", {"ttl_minutes": 10, "tags": ["a"]})
            send_mail(smtp_server.port, box["address"], "Verify", "Your code is 482913.",
                      attachments=[(b"a,b\n", "text/csv", "t.csv")])
            results = {"create_mailbox": box,
                       "wait_for_code": await call(session, "wait_for_code", {"mailbox_id": box["id"],
                                                                              "timeout_seconds": 10})}
            ids = {"mailbox_id": box["id"], "message_id": results["wait_for_code"]["message_id"]}
            results["wait_for_message"] = await call(session, "wait_for_message", {"mailbox_id": box["id"]})
            results["list_mailboxes"] = await call(session, "list_mailboxes")
            results["get_mailbox"] = await call(session, "get_mailbox", {"mailbox_id": box["id"]})
            results["renew_mailbox"] = await call(session, "renew_mailbox", {"mailbox_id": box["id"],
                                                                             "ttl_minutes": 20})
            results["list_messages"] = await call(session, "list_messages", {"mailbox_id": box["id"]})
            results["get_message"] = await call(session, "get_message", ids)
            results["search_messages"] = await call(session, "search_messages", {"query": "482913"})
            results["get_attachment"] = await call(session, "get_attachment", {**ids, "attachment_id": 1})
            results["send_message"] = await call(session, "send_message", {"mailbox_id": box["id"],
                                                                           "to": ["x@example.com"], "subject": "s",
                                                                           "text": "t"})
            results["wait_for_delivery"] = await call(session, "wait_for_delivery", {
                "mailbox_id": box["id"], "message_id": results["send_message"]["message_id"], "timeout_seconds": 0})
            results["reply_to_message"] = await call(session, "reply_to_message", {**ids, "text": "Thanks."})
            results["forward_message"] = await call(session, "forward_message", {**ids, "to": ["y@example.com"]})
            results["release_message"] = await call(session, "release_message", {**ids, "to": ["z@example.com"]})
            results["list_threads"] = await call(session, "list_threads", {"mailbox_id": box["id"]})
            results["get_thread"] = await call(session, "get_thread", {
                "mailbox_id": box["id"], "thread_id": results["list_threads"]["threads"][0]["id"]})
            results["check_message"] = await call(session, "check_message",
                                                  {**ids, "checks": ["html", "headers", "spam"]})
            results["create_sandbox"] = await call(session, "create_sandbox", {"ttl_minutes": 10})
            results["set_faults"] = await call(session, "set_faults", {
                "mailbox_id": results["create_sandbox"]["id"], "rules": [{"stage": "rcpt", "code": 451}]})
            results["delete_mailbox"] = await call(session, "delete_mailbox", {"mailbox_id": box["id"]})
            results["create_domain"] = await call(session, "create_domain", {"name": "schema.test"})
            results["list_domains"] = await call(session, "list_domains")
            results["verify_domain"] = await call(session, "verify_domain",
                                                  {"domain_id": results["create_domain"]["id"]})
            results["delete_domain"] = await call(session, "delete_domain",
                                                  {"domain_id": results["create_domain"]["id"]})
            return schemas, results

    schemas, results = run(scenario())
    assert set(results) == set(schemas)
    for name, structured in results.items():
        jsonschema.validate(structured, schemas[name])
    assert results["get_attachment"]["text"] == "a,b\n"


def test_arguments_are_strict_and_a_misspelt_one_does_nothing(mcp_http, owner):
    async def scenario():
        async with mcp_http.session(owner) as session:
            box = await call(session, "create_mailbox")
            return box, {
                "unknown": await error_of(session, "create_mailbox", {"ttl": 10}),
                "string_for_int": await error_of(session, "create_mailbox", {"ttl_minutes": "10"}),
                "too_short": await error_of(session, "create_mailbox", {"ttl_minutes": 1}),
                "over_the_plan": await error_of(session, "create_mailbox", {"ttl_minutes": 10 ** 7}),
                "renew_over": await error_of(session, "renew_mailbox", {"mailbox_id": box["id"],
                                                                         "ttl_minutes": 10 ** 7}),
                "bad_tag": await error_of(session, "create_mailbox", {"tags": ["Not A Tag"]}),
                "reserved": await error_of(session, "create_mailbox", {"local_part": "postmaster"}),
                "bool_as_text": await error_of(session, "list_mailboxes", {"include_expired": "yes"}),
            }

    box, errors = run(scenario())
    for name, text in errors.items():
        assert text.startswith("invalid_request: "), (name, text)
        assert "ttl_ms" not in text and "pydantic" not in text and "https://" not in text, (name, text)
    assert errors["unknown"].startswith("invalid_request: ttl: not an argument of create_mailbox")
    assert errors["string_for_int"].startswith("invalid_request: ttl_minutes: ")
    assert "ttl_minutes" in errors["too_short"]
    assert errors["over_the_plan"] == errors["renew_over"]
    assert errors["over_the_plan"].startswith("invalid_request: ttl_minutes: must be between 5 and ")
    assert errors["over_the_plan"].endswith(" minutes on the pro plan.")
    assert errors["bad_tag"].startswith("invalid_request: tags: ")
    assert errors["reserved"].startswith("invalid_request: local_part: ")
    assert errors["bool_as_text"].startswith("invalid_request: include_expired: ")
    assert list(Mailbox.objects.values_list("id", flat=True)) == [uuid.UUID(box["id"])], "a refused call did something"


SENDABLE = {"to": ["someone@example.com"], "subject": "Hi", "text": "Hello"}
# Each tool and the route it mirrors: bad arguments, refused in the same words by both.
ARGUMENTS_REFUSED = {
    ("create_mailbox", "/api/v1/mailboxes"): [
        {"name": "a\nb"}, {"name": "x" * 101}, {"tags": ["ok", "Not A Tag"]}, {"tags": ["t"] * 11},
        {"tags": [" a "]}, {"local_part": "a..b"}, {"local_part": ""}],
    ("create_domain", "/api/v1/domains"): [{"name": ""}, {"name": " "}, {"name": "localhost"}, {"name": "a" * 250 + ".test"},
                                           {"name": "relay.localhost"}],
    ("send_message", "/api/v1/mailboxes/{mailbox_id}/messages"): [
        {**SENDABLE, "to": []}, {**SENDABLE, "to": ["a@example.com", "not an address"]},
        {**SENDABLE, "to": ["a@example.com"] * 51}, {**SENDABLE, "subject": " "}, {**SENDABLE, "subject": "a\u2028b"},
        {**SENDABLE, "subject": "s" * 999}, {**SENDABLE, "text": "t" * 100_001}, {**SENDABLE, "reply_to": "x"},
        {**SENDABLE, "cc": ["@example.com"]},
        *({**SENDABLE, "attachments": [{"filename": "a.txt", "content_type": "text/plain", "content_base64": "eA=="},
                                       attachment]}
          for attachment in ({"filename": "a\nb", "content_type": "text/plain", "content_base64": "eA=="},
                             {"filename": "", "content_type": "text/plain", "content_base64": "eA=="},
                             {"filename": "a", "content_type": "text", "content_base64": "eA=="},
                             {"filename": "a", "content_type": "multipart/mixed", "content_base64": "eA=="},
                             {"filename": "a", "content_type": "text/plain", "content_base64": "e A=="})),
        {**SENDABLE, "attachments": [{"filename": "a", "content_type": "text/plain", "content_base64": ""}] * 21}],
}


@pytest.mark.parametrize("tool, route", ARGUMENTS_REFUSED)
def test_a_tool_checks_its_arguments_as_the_route_checks_its_body(mcp_http, owner, tool, route):
    cases = ARGUMENTS_REFUSED[tool, route]
    mailbox = None
    if "{mailbox_id}" in route:
        mailbox = Client(HTTP_AUTHORIZATION=f"Bearer {owner}").post(
            "/api/v1/mailboxes", {}, content_type="application/json").json()["id"]
        route = route.format(mailbox_id=mailbox)

    async def scenario():
        async with mcp_http.session(owner) as session:
            return [await error_of(session, tool, {**arguments, **({"mailbox_id": mailbox} if mailbox else {})})
                    for arguments in cases]

    errors = run(scenario())
    api = Client(HTTP_AUTHORIZATION=f"Bearer {owner}")
    for arguments, error in zip(cases, errors):
        answer = api.post(route, arguments, content_type="application/json")
        assert answer.status_code == 400, (arguments, answer.content)
        [(name, reasons)] = answer.json()["fields"].items()
        assert error == f"invalid_request: {name}: {' '.join(reasons)}", (arguments, error, answer.json())
    assert Mailbox.objects.count() == (1 if mailbox else 0) and not Domain.objects.exists(), "a refused call made something"
    assert not OutboxMail.objects.exists(), "a refused call sent something"


def test_create_mailbox_keeps_a_name_at_its_limit_and_a_repeated_tag_once(mcp_http, owner):
    async def scenario():
        async with mcp_http.session(owner) as session:
            return await call(session, "create_mailbox", {"name": "x" * 100, "tags": ["a", "b", "a"]})

    kept = run(scenario())
    assert (kept["name"], kept["tags"]) == ("x" * 100, ["a", "b"])


def test_search_and_wait_filters_are_checked_as_the_api_checks_its_query(mcp_http, owner):
    async def scenario():
        async with mcp_http.session(owner) as session:
            box = await call(session, "create_mailbox")
            started = time.monotonic()
            errors = {
                "two_lines": await error_of(session, "list_messages", {"mailbox_id": box["id"], "query": "a\nb"}),
                "nul": await error_of(session, "search_messages", {"query": "a\x00b"}),
                "long_subject": await error_of(session, "wait_for_code", {"mailbox_id": box["id"],
                                                                          "subject": "x" * 201, "timeout_seconds": 30}),
                "empty_from": await error_of(session, "wait_for_message", {"mailbox_id": box["id"], "from": "",
                                                                           "timeout_seconds": 30}),
                "after_too_big": await error_of(session, "wait_for_message", {"mailbox_id": box["id"],
                                                                              "after": 10 ** 19, "timeout_seconds": 30}),
            }
            took = time.monotonic() - started
            fits = await call(session, "wait_for_message", {"mailbox_id": box["id"], "subject": " " + "x" * 200 + " ",
                                                            "timeout_seconds": 0})
            return box, errors, took, fits

    box, errors, took, fits = run(scenario())
    assert errors["two_lines"].startswith("invalid_request: q: must be one line"), errors
    assert errors["nul"].startswith("invalid_request: q: must be one line"), errors
    assert errors["long_subject"] == "invalid_request: subject: takes at most 200 characters.", errors
    assert errors["empty_from"].startswith("invalid_request: from: may not be empty"), errors
    assert errors["after_too_big"].startswith("invalid_request: after: must be between 1 and "), errors
    assert took < 30, "a refused wait was held"  # a guard: each is refused before any wait
    assert fits == {"message": None}, "200 characters once trimmed are within the limit"
    # The API refuses the same values in its query, for the same reason in the same words.
    api = Client(HTTP_AUTHORIZATION=f"Bearer {owner}")
    for query, name, error in (("subject=" + "x" * 201, "subject", "long_subject"), ("from=", "from", "empty_from"),
                               ("after=" + str(10 ** 19), "after", "after_too_big"), ("q=a%0Ab", "q", "two_lines")):
        answer = api.get(f"/api/v1/mailboxes/{box['id']}/messages?{query}")
        assert answer.status_code == 400, (query, answer.content)
        assert errors[error] == f"invalid_request: {name}: {' '.join(answer.json()['fields'][name])}", answer.json()


def test_an_id_is_checked_as_a_uuid_and_never_steers_a_call_elsewhere(mcp_http, owner, smtp_server):
    async def scenario():
        async with mcp_http.session(owner) as session:
            box = await call(session, "create_mailbox")
            send_mail(smtp_server.port, box["address"], "Keep", "me")
            message = await call(session, "wait_for_message", {"mailbox_id": box["id"], "timeout_seconds": 10})
            started = time.monotonic()
            errors = [
                await error_of(session, "delete_mailbox", {"mailbox_id": f"{box['id']}/messages/"
                                                                         f"{message['message']['id']}"}),
                await error_of(session, "get_mailbox", {"mailbox_id": f"{box['id']}/events"}),
                await error_of(session, "wait_for_message", {"mailbox_id": "not-a-uuid"}),
                await error_of(session, "get_message", {"mailbox_id": box["id"], "message_id": "1 OR 1=1"}),
            ]
            took = time.monotonic() - started
            listed = await call(session, "list_messages", {"mailbox_id": box["id"]})
            return box, errors, took, listed

    box, errors, took, listed = run(scenario())
    assert all(text.startswith("invalid_request: ") for text in errors), errors
    assert errors[0].startswith("invalid_request: mailbox_id: ") and errors[3].startswith("invalid_request: message_id")
    assert took < 10, "an id was held on an event stream"  # a guard: refused at once, never held
    assert [m["subject"] for m in listed["messages"]] == ["Keep"], "the message was deleted"
    assert Mailbox.objects.get(id=box["id"]).status == "active"


def test_both_protocol_revisions_are_served_and_a_routing_header_that_disagrees_is_400(mcp_http, owner):
    """The SDK's own client: 2026-07-28 by `server/discover` when it may, 2025-11-25 by the
    initialize handshake when told to; and a Mcp-Method header that names another method
    than the body's is refused before anything runs."""
    from mcp import Client

    async def connect(mode: str) -> tuple[str, int]:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {owner}"}, timeout=30) as http:
            async with Client(streamable_http_client(mcp_http.url, http_client=http), mode=mode) as client:
                return client.protocol_version, len((await client.list_tools()).tools)

    assert run(connect("auto")) == ("2026-07-28", len(TOOLS))
    assert run(connect("legacy")) == ("2025-11-25", len(TOOLS))
    headers = {"Authorization": f"Bearer {owner}", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "delete_mailbox"}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    mismatched = requests.post(mcp_http.url, json=body, headers=headers, timeout=10)
    assert mismatched.status_code == 400, mismatched.text
