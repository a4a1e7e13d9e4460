"""A real Cyrus IMAP as the backend (tests/cyrus_server.py): accounts made and removed as
its admin, mail delivered over LMTP as an MX would, and read into Relay over JMAP
(relay/mailserver/), in this process and with real worker, beat and web processes."""
import json
import smtplib
import time
from unittest import mock

import pytest
import requests
from django.utils import timezone

from expiry.cleanup import CleanupOutcome, mailbox_cleanup
from core.schedules import install_schedules
from mailboxes.models import Mailbox, Message
from relay import mailserver
from relay.backends import get_backend, keeps_accounts
from relay.reconcile import orphans_find
from tests import mail_corpus as corpus
from tests.helpers import answers, create_via_api, free_port, wait_until


def mail(to: str, subject: str, text: str, *, filler: int = 0, **options) -> bytes:
    """A mail from the service, `filler` lines of text longer (corpus.message's options)."""
    return corpus.mail(to, subject, text + "\n" + "filler line of text\n" * filler,
                       sender="Service <service@example.com>", **options)


def messages(client, box: dict, query: str = "") -> list[dict]:
    response = client.get(f"/api/v1/mailboxes/{box['id']}/messages{query}")
    assert response.status_code == 200, response.content
    return response.json()["results"]


# --- accounts --------------------------------------------------------------------------------------
def test_a_mailbox_is_a_cyrus_account_from_creation_to_removal(cyrus, client_pro, settings):
    settings.RELAY_DOMAINS = ["relay.localhost", "other.localhost"]
    created = create_via_api(client_pro, local_part="alice.smith")
    assert created.status_code == 201, created.content
    box = created.json()
    assert cyrus.accounts() == {"alice.smith"}
    # One account per local part: the same local part in another domain is taken.
    again = create_via_api(client_pro, local_part="alice.smith", domain="other.localhost")
    assert again.status_code == 409 and again.json()["code"] == "conflict"
    cyrus.deliver(box["address"], mail(box["address"], "Hello", "first"))

    assert client_pro.delete(f"/api/v1/mailboxes/{box['id']}").status_code == 204
    assert mailbox_cleanup(mailbox_id=box["id"]) == CleanupOutcome.DONE
    assert cyrus.accounts() == set()
    with pytest.raises(smtplib.SMTPRecipientsRefused) as refused:
        cyrus.deliver(box["address"], mail(box["address"], "Too late", "after removal"))
    assert refused.value.recipients[box["address"]][0] == 550


def test_reconcile_counts_only_accounts_relay_handed_out(cyrus, client_pro):
    box = create_via_api(client_pro, local_part="kept").json()
    orphan = create_via_api(client_pro, local_part="orphan").json()
    Mailbox.objects.filter(id=orphan["id"]).update(status="expired", cleanup_state="done")  # its cleanup "lost"
    imap = cyrus._admin()
    imap.create("user/operators-own")  # someone else's account on the same server
    imap.logout()
    assert cyrus.accounts() == {"kept", "orphan", "operators-own"}
    assert [o.backend_id for o in orphans_find(domains=["relay.localhost"])] == ["orphan"]
    assert box["address"].startswith("kept@")


# --- reading ---------------------------------------------------------------------------------------
def test_delivered_mail_reads_as_if_relays_own_smtp_had_stored_it(cyrus, client_pro, settings):
    settings.RELAY_WEBHOOK_ALLOW_PRIVATE = True
    hook = client_pro.post("/api/v1/webhooks", {"url": "http://127.0.0.1:9/hook", "events": ["message.received"]},
                           format="json")
    assert hook.status_code == 201, hook.content
    box = create_via_api(client_pro, local_part="reader").json()
    pdf = b"%PDF-1.4 not really\x00\xff"
    raw = mail(box["address"], "Your code", "Your verification code is 482913. See https://example.com/verify",
               html="<p>Code <b>482913</b> <a href='https://example.com/verify'>verify</a></p>",
               attachments=[(pdf, "application/pdf", "invoice.pdf")])
    cyrus.deliver(box["address"], raw, sender="bounces@example.com")

    # No poll ran: the list reads the server first, so the mail is there at once.
    [item] = messages(client_pro, box)
    assert item["subject"] == "Your code" and item["from"] == "Service <service@example.com>"
    assert item["envelope_from"] == "bounces@example.com" and item["envelope_to"] == box["address"]
    assert item["has_attachments"] is True
    detail = client_pro.get(f"/api/v1/mailboxes/{box['id']}/messages/{item['id']}").json()
    assert detail["codes"] == ["482913"]
    assert [link["url"] for link in detail["links"]] == ["https://example.com/verify"]
    assert "482913" in detail["text"] and "<b>482913</b>" in detail["html"]
    [attachment] = detail["attachments"]
    assert attachment["filename"] == "invoice.pdf" and attachment["size"] == len(pdf)
    assert client_pro.get(attachment["download_url"]).content == pdf
    stored = client_pro.get(f"/api/v1/mailboxes/{box['id']}/messages/{item['id']}/raw").content
    # The blob Cyrus holds: the trace headers it prepends, then the mail as sent.
    assert stored.startswith(b"Return-Path: <bounces@example.com>\r\n")
    assert raw.split(b"\r\n\r\n", 1)[1] in stored
    found = client_pro.get("/api/v1/messages?q=482913").json()["results"]
    assert [m["id"] for m in found] == [item["id"]]
    # Read again and polled: still one message, and one webhook delivery for it.
    mailserver.poll()
    assert len(messages(client_pro, box)) == 1 and Message.objects.count() == 1
    deliveries = client_pro.get(f"/api/v1/webhooks/{hook.json()['id']}/deliveries").json()["results"]
    assert [d["event"] for d in deliveries] == ["message.received"]


def test_an_authentication_results_a_sender_wrote_authenticates_nothing(cyrus, client_pro, senders):
    """pass.test publishes DMARC p=reject and the mail is unsigned: only an SPF pass the
    mail server itself reported could make it pass. A sender forges one under the name
    Relay once took by default, and one under the server's own name below the header the
    server wrote (the MX in front of Cyrus, played here by the test, writes the topmost)."""
    forgeries = {
        "the old default name": b"Authentication-Results: relay.localhost; spf=pass smtp.mailfrom=security@pass.test\r\n",
        "below the server's own": (f"Authentication-Results: {cyrus.relay_settings()['RELAY_AUTHSERV_ID']}; "
                                   "dkim=none\r\nAuthentication-Results: "
                                   f"{cyrus.relay_settings()['RELAY_AUTHSERV_ID']}; spf=pass "
                                   "smtp.mailfrom=security@pass.test\r\n").encode(),
    }
    for number, (case, headers) in enumerate(forgeries.items()):
        box = create_via_api(client_pro, local_part=f"forged{number}").json()
        raw = headers + corpus.mail(box["address"], "Your code", "111111", sender="security@pass.test")
        cyrus.deliver(box["address"], raw, sender="security@pass.test")
        [item] = messages(client_pro, box)
        verdict = client_pro.get(f"/api/v1/mailboxes/{box['id']}/messages/{item['id']}").json()["authentication"]
        assert item["authenticated"] is False, case
        assert verdict["spf"]["result"] == "none" and verdict["dmarc"]["result"] == "fail", case
        assert client_pro.get(f"/api/v1/mailboxes/{box['id']}/messages",
                              {"authenticated": "true"}).json()["results"] == [], case
    # What the server itself reports on top is taken.
    box = create_via_api(client_pro, local_part="reported").json()
    raw = (f"Authentication-Results: {cyrus.relay_settings()['RELAY_AUTHSERV_ID']}; spf=pass "
           "smtp.mailfrom=security@pass.test\r\n").encode() + corpus.mail(box["address"], "Your code", "222222",
                                                                           sender="security@pass.test")
    cyrus.deliver(box["address"], raw, sender="security@pass.test")
    [item] = messages(client_pro, box)
    assert item["authenticated"] is True


def test_an_idle_poll_asks_jmap_nothing_and_a_delivery_is_read_by_the_next(cyrus, client_pro):
    boxes = [create_via_api(client_pro, local_part=f"idle{i}").json() for i in range(5)]
    store = get_backend()

    def read_at_current_markers() -> bool:
        """A poll, then whether each account's stored marker is the one Cyrus reports now.
        The first poll is enough here; under the whole suite's load Cyrus once moved a new
        account's HIGHESTMODSEQ after it, and the next poll rightly read that account again."""
        mailserver.poll()
        stored = {address.split("@")[0]: marker for address, marker
                  in Mailbox.objects.values_list("address", "server_marker")}
        return store.markers() == stored

    wait_until(read_at_current_markers, timeout=10, message="every account read at Cyrus's current marker")
    jmap = store.jmap
    with mock.patch.object(jmap, "call", wraps=jmap.call) as calls:
        assert mailserver.poll() == 0
        assert calls.call_count == 0, "an idle poll asked JMAP about mailboxes with no news"
        cyrus.deliver(boxes[3]["address"], mail(boxes[3]["address"], "News", "for one of five"))
        assert mailserver.poll() == 1
    asked = {call["accountId"] for request in calls.call_args_list for _, call, _ in request.args[0]}
    assert asked == {"idle3"}, "only the account that changed was read"


def test_mail_delivered_after_expires_at_is_never_shown(cyrus, client_pro):
    box = create_via_api(client_pro, local_part="late").json()
    cyrus.deliver(box["address"], mail(box["address"], "In time", "before the end"))
    delivered = time.time()
    # Cyrus stamps the second: the end comes after the whole second of that delivery and
    # its margin, 10 ms into a second, so the late delivery lands a few milliseconds into
    # it, where Cyrus's coarse clock may stamp the second before (relay/mailserver/reader.py).
    wait_until(lambda: time.time() >= int(delivered) + 2.01, timeout=4, interval=0.001,
               message="10 ms into the second after next")
    ended = timezone.now()
    Mailbox.objects.filter(id=box["id"]).update(expires_at=ended)
    cyrus.deliver(box["address"], mail(box["address"], "Too late", "after the end"))  # Cyrus still takes it
    late = time.time()
    mailserver.read_before_removal(box["id"])
    assert list(Message.objects.values_list("subject", flat=True)) == ["In time"], (
        f"delivered at {delivered:.3f} and {late:.3f}, the end at {ended.timestamp():.3f}")


def test_a_mail_server_that_is_down_breaks_no_read_and_loses_nothing(cyrus, client_pro):
    box = create_via_api(client_pro, local_part="outage").json()
    cyrus.deliver(box["address"], mail(box["address"], "Before", "read before the outage"))
    assert [m["subject"] for m in messages(client_pro, box)] == ["Before"]
    cyrus.deliver(box["address"], mail(box["address"], "Unread", "delivered, not yet read"))

    cyrus.stop()
    started = time.monotonic()
    assert [m["subject"] for m in messages(client_pro, box)] == ["Before"]  # what is stored, at once
    assert time.monotonic() - started < 10  # a guard: not held through the reader's retries
    refused = create_via_api(client_pro, local_part="during")
    assert refused.status_code == 503 and refused.json()["code"] == "backend_unavailable"
    with pytest.raises(Exception):
        mailserver.poll()

    cyrus.start()
    cyrus.deliver(box["address"], mail(box["address"], "After", "delivered after the restart"))
    mailserver.poll()
    assert sorted(m["subject"] for m in messages(client_pro, box)) == ["After", "Before", "Unread"]


# --- with Relay's processes --------------------------------------------------------------------------
@pytest.fixture
def cyrus_processes(cyrus, processes, settings):
    """Worker and beat (and a web process when asked) on Cyrus, beat polling it every second."""
    processes.env.update(cyrus.relay_settings())
    processes.env["RELAY_MAILSERVER_POLL_SECONDS"] = "1"
    settings.RELAY_MAILSERVER_POLL_SECONDS = 1
    for name, value in cyrus.relay_settings().items():  # `processes` brings the Stalwart stand-in's
        setattr(settings, name, value)
    install_schedules(read_mail_server=keeps_accounts())  # the poll's schedule, on for a backend that holds the mail
    return processes


def _create(owner_key: str, local_part: str, ttl_ms: int = 600_000) -> Mailbox:
    from mailboxes.lifecycle import mailbox_create
    from accounts.identity import authenticate

    return mailbox_create(backend=get_backend(), caller=authenticate(owner_key), local_part=local_part,
                          domain=None, ttl_ms=ttl_ms)[0]


def test_a_held_wait_and_an_event_stream_are_answered_by_an_lmtp_delivery(cyrus_processes, cyrus, client_pro):
    port = free_port()
    cyrus_processes.worker("w1")
    cyrus_processes.beat("beat")
    cyrus_processes.web("web", port)
    cyrus_processes.wait_ready()
    box = _create(client_pro.key, "waiter")
    base = f"http://127.0.0.1:{port}/api/v1/mailboxes/{box.id}"
    headers = {"Authorization": f"Bearer {client_pro.key}"}
    wait_until(lambda: answers(base, headers=headers, status=200), timeout=30,
               message="the web process")

    stream = requests.get(f"{base}/events", headers=headers, stream=True, timeout=30)
    lines = stream.iter_lines(decode_unicode=True)
    assert next(lines) == ": connected"
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(lambda: (requests.get(f"{base}/messages?wait=20", headers=headers, timeout=30),
                                    time.monotonic()))
        wait_until(lambda: Mailbox.objects.filter(id=box.id).exclude(server_state="").exists(), timeout=10,
                   message="the wait's first read")
        accepted = cyrus.deliver(box.address, mail(box.address, "Waited for", "Your code is 739122."))
        answer, answered = held.result(timeout=30)
    assert answer.status_code == 200 and [m["subject"] for m in answer.json()["results"]] == ["Waited for"]
    assert answered - accepted < 2.0, f"the wait was answered {answered - accepted:.2f} s after the LMTP 250"
    event = []
    while len(event) < 3:
        line = next(lines)
        if line:
            event.append(line)
    stream.close()
    assert event[0].startswith("id: ") and event[1] == "event: message"
    assert json.loads(event[2][len("data: "):])["subject"] == "Waited for"


def test_twenty_deliveries_give_twenty_messages_with_a_worker_killed_midway(cyrus_processes, cyrus, client_pro):
    box = _create(client_pro.key, "twenty")
    cyrus_processes.worker("w1")
    cyrus_processes.beat("beat")
    cyrus_processes.wait_ready()
    wait_until(lambda: Mailbox.objects.filter(id=box.id).exclude(server_state="").exists(), timeout=15,
               message="the first poll")
    for i in range(20):  # large enough that storing twenty takes a while
        cyrus.deliver(box.address, mail(box.address, f"Message {i}", f"number {i}", filler=8000))
    count = lambda: Message.objects.filter(mailbox=box).count()  # noqa: E731
    at_kill = wait_until(count, timeout=15, interval=0.005, message="the poll to start storing")
    cyrus_processes.kill("w1")
    assert at_kill < 20, "the worker stored all twenty before it could be killed; the test proves nothing"
    cyrus_processes.worker("w2")
    cyrus_processes.wait_ready()
    wait_until(lambda: count() >= 20, timeout=60, message="the twenty messages")
    subjects = list(Message.objects.filter(mailbox=box).values_list("subject", flat=True))
    assert sorted(subjects) == sorted(f"Message {i}" for i in range(20)), "a message was lost or stored twice"
    box.refresh_from_db()
    assert box.message_count == 20


def test_expiry_removes_the_cyrus_account(cyrus_processes, cyrus, client_pro, settings):
    settings.RELAY_MIN_TTL_MS = 1000
    box = _create(client_pro.key, "expiring", ttl_ms=2000)
    cyrus.deliver(box.address, mail(box.address, "Last words", "delivered in time"))
    assert cyrus.accounts() == {"expiring"}
    cyrus_processes.worker("w1")
    cyrus_processes.beat("beat")
    cyrus_processes.wait_ready()
    wait_until(lambda: Mailbox.objects.filter(id=box.id, cleanup_state="done").exists(), timeout=30,
               message="the cleanup")
    assert cyrus.accounts() == set()
    with pytest.raises(smtplib.SMTPRecipientsRefused):
        cyrus.deliver(box.address, mail(box.address, "After", "refused"))
    # What was delivered before the end was read before the account went.
    assert list(Message.objects.filter(mailbox=box).values_list("subject", flat=True)) == ["Last words"]


# --- accounts Relay did not create (SECURITY.md, "A mail server as the backend") ----------------
def carols_own_account(cyrus) -> None:
    """A Cyrus user Relay never created, with a subfolder and mail in it."""
    imap = cyrus._admin()
    try:
        assert imap.create("user/carol")[0] == "OK" and imap.create("user/carol/Projects")[0] == "OK"
    finally:
        imap.logout()
    cyrus.deliver("carol@relay.localhost", mail("carol@relay.localhost", "Your code", "Your code is 551177."))


def admin_rights_on(cyrus, folder: str) -> str:
    imap = cyrus._admin()
    try:
        _, acl = imap.getacl(folder)
    finally:
        imap.logout()
    return acl[0].decode()


def test_an_existing_cyrus_account_is_never_taken_over_read_or_removed(cyrus, api):
    from tests.cyrus_server import ADMIN

    carols_own_account(cyrus)
    before = admin_rights_on(cyrus, "user/carol")
    response = create_via_api(api, local_part="carol")  # anonymous, as the attack was
    assert response.status_code == 409 and response.json()["code"] == "conflict", response.content
    assert "token" not in response.json()
    assert cyrus.accounts() == {"carol"} and admin_rights_on(cyrus, "user/carol") == before
    assert ADMIN not in before.split(" ", 1)[1], "Relay granted itself rights on an account it did not create"
    row = Mailbox.objects.get(address="carol@relay.localhost")
    assert (row.status, row.cleanup_state) == ("deleted", "done")  # nothing owed to someone else's account
    assert Message.objects.count() == 0
    # Even a cleanup that somehow came to be owed for that name leaves the account alone.
    Mailbox.objects.filter(id=row.id).update(cleanup_state="pending")
    assert mailbox_cleanup(mailbox_id=row.id) == CleanupOutcome.DEAD
    assert "not created by Relay" in Mailbox.objects.get(id=row.id).cleanup_last_error
    imap = cyrus._admin()
    try:
        _, folders = imap.list('""', "user/carol*")
    finally:
        imap.logout()
    assert len([f for f in folders if f]) == 2, "carol's account or its subfolder was removed"


@pytest.mark.parametrize("name", ["admin-of-cyrus", "cyrus", "anyone"])
def test_the_cyrus_admin_and_its_reserved_names_are_never_handed_out(cyrus, api, name):
    from tests.cyrus_server import ADMIN

    local_part = ADMIN if name == "admin-of-cyrus" else name
    response = create_via_api(api, local_part=local_part)
    assert response.status_code == 400 and "local_part" in response.json()["fields"], response.content
    assert cyrus.accounts() == set()


def test_reconcile_leaves_an_account_of_a_reserved_name_that_relay_did_not_make(cyrus, client_pro):
    from relay.reconcile import reconcile

    carols_own_account(cyrus)
    assert create_via_api(client_pro, local_part="carol").status_code == 409  # its name is now reserved
    outcome = reconcile(domains=["relay.localhost"], destroy=True)
    assert outcome.destroyed == [] and cyrus.accounts() == {"carol"}


def test_a_strangers_wait_reads_nothing_from_the_mail_server(cyrus, client_pro, make_client):
    box = create_via_api(client_pro, local_part="private").json()
    cyrus.deliver(box["address"], mail(box["address"], "Secret", "for the owner"))
    stranger = make_client("mallory", "pro")
    jmap = get_backend().jmap
    with mock.patch.object(jmap, "call", wraps=jmap.call) as calls:
        for _ in range(3):
            assert stranger.get(f"/api/v1/mailboxes/{box['id']}/messages?wait=1").status_code == 404
            assert stranger.get(f"/api/v1/mailboxes/{box['id']}/events").status_code == 404
    assert calls.call_count == 0, "a stranger's wait made the mail server read someone else's mailbox"
