"""The Python client (client/, `pip install ./client`) and its pytest plugin, against a
live Relay: a gunicorn web process, mail over a real SMTP socket. No HTTP is mocked."""
import base64
import subprocess
import sys
import textwrap
import threading
import time
from datetime import datetime

import pytest
import redis
from django.conf import settings
from django.utils import timezone

from accounts.services import account_create_with_key
from mailboxes.models import Mailbox
from relay_client import Mailbox as MailboxResult, Message, Relay, RelayError, WaitTimeout, verify_webhook
from tests.helpers import ROOT, wait_until
from tests.mail_corpus import send_mail
from tests.stalwart_fake import MAIL_SERVER_ID, TOKEN
from tests.relay.inbound.test_submission import no_auth_failures  # noqa: F401 (a fixture)
from webhooks.signing import new_secret, sign

pytestmark = pytest.mark.workers


@pytest.fixture(scope="module")
def web(module_processes, stalwart_server):
    """One web process for the tests that only talk to it, on the fake Stalwart as `processes`
    would start it: starting one per test was most of their time. Each test still has rows
    of its own, an empty Redis and a reset Stalwart (`live`)."""
    return module_processes.start_web(env={"RELAY_BACKEND": "stalwart", "STALWART_URL": stalwart_server.url,
                                           "STALWART_TOKEN": TOKEN, "RELAY_AUTHSERV_ID": MAIL_SERVER_ID})


@pytest.fixture
def live(web, transactional_db, stalwart, broker):
    _, key = account_create_with_key(login="tester", plan="pro")
    return web, key


@pytest.fixture
def relay(live) -> Relay:
    return Relay(*live)


def test_mailboxes_are_created_listed_renewed_and_deleted(relay):
    box = relay.create_mailbox(ttl_minutes=10, local_part="client-box", name="n", tags=["t"])
    assert isinstance(box, MailboxResult) and box.address.startswith("client-box@") and box.tags == ["t"]
    assert [m.id for m in relay.list_mailboxes()] == [box.id]
    assert relay.get_mailbox(box.id).status == "active"
    assert isinstance(box.expires_at, datetime) and box.expires_at.tzinfo is not None
    assert relay.renew_mailbox(box.id, ttl_minutes=30).expires_at > box.expires_at
    assert relay.delete_mailbox(box.id) is True
    with pytest.raises(RelayError) as gone:
        relay.get_mailbox(box.id)
    assert (gone.value.code, gone.value.status) == ("not_found", 404)


def test_a_code_arrives_during_the_wait_and_the_message_reads_whole(relay, smtp_server):
    box = relay.create_mailbox()
    threading.Timer(1.0, send_mail, (smtp_server.port, box.address, "Verify", "Your code is 482913."),
                    {"attachments": [(b"%PDF-1.4 bytes", "application/pdf", "a.pdf")]}).start()
    started = time.monotonic()
    assert relay.wait_for_code(box.id, timeout_seconds=20) == "482913"
    assert time.monotonic() - started < 15  # woken by the mail, not by the end of the 20 s wait
    [item] = relay.list_messages(box.id)
    message = relay.get_message(box.id, item.id)
    assert isinstance(message, Message) and message.from_ == "service@example.com" and message.codes == ["482913"]
    assert relay.get_attachment(box.id, item.id, message.attachments[0].id) == b"%PDF-1.4 bytes"
    assert b"Subject: Verify" in relay.get_raw(box.id, item.id)
    assert [m.id for m in relay.search_messages("482913")] == [item.id]
    assert [m.id for m in relay.search_messages("482913", mailbox_id=box.id)] == [item.id]
    assert relay.wait_for_message(box.id, timeout_seconds=2, after=item.id) is None


def test_domains_and_authenticated_waits_through_the_client(relay, smtp_server, dns, senders, stalwart):
    from tests import dkim_keys
    from tests.domains.test_domains import publish
    from tests.mail_corpus import mail, send

    stalwart.domains["d9"] = "client.test"  # a mail server as the backend must know the domain too
    added = relay.create_domain("client.test")
    assert added.status == "pending" and [record.type for record in added.records] == ["MX", "TXT", "TXT", "TXT"]
    publish(dns, added.raw)
    verified = relay.verify_domain(added.id)
    assert verified.status == "verified" and verified.verified_at is not None
    assert [domain.name for domain in relay.list_domains()] == ["client.test"]
    box = relay.create_mailbox(domain="client.test")
    assert box.address.endswith("@client.test")
    send(smtp_server.port, box.address, mail(box.address, "Code", "Code 111111.", sender="noreply@pass.test"),
         sender="noreply@pass.test", source=senders.unlisted)
    real = dkim_keys.sign(mail(box.address, "Code", "Code 222222.", sender="noreply@pass.test"), "pass.test", "sel",
                          senders.keys["pass.test"])
    send(smtp_server.port, box.address, real, sender="noreply@pass.test", source=senders.listed)
    assert relay.wait_for_code(box.id, timeout_seconds=10, authenticated=True) == "222222"
    assert [m.authenticated for m in relay.list_messages(box.id)] == [True, False]
    assert [m.codes for m in relay.list_messages(box.id, authenticated=True)] == [[]]  # list items carry no body
    with pytest.raises(RelayError) as in_use:
        relay.delete_domain(added.id)
    assert in_use.value.status == 409
    relay.delete_mailbox(box.id)
    assert relay.delete_domain(added.id) is True


def test_wait_for_code_raises_a_timeout_that_says_what_it_waited_for(relay):
    box = relay.create_mailbox()
    started = time.monotonic()
    with pytest.raises(WaitTimeout) as timed_out:
        relay.wait_for_code(box.id, timeout_seconds=2, from_="bank.example")
    assert 1.5 <= time.monotonic() - started < 30  # the whole wait; the upper bound catches one held on
    assert box.id in str(timed_out.value) and "bank.example" in str(timed_out.value)


def test_an_expired_mailbox_is_a_relay_error_with_the_api_code(relay):
    box = relay.create_mailbox()
    Mailbox.objects.filter(id=box.id).update(status="expired", cleanup_state="done", expired_at=timezone.now())
    with pytest.raises(RelayError) as expired:
        relay.wait_for_message(box.id, timeout_seconds=1)
    assert (expired.value.code, expired.value.status) == ("expired", 410)


def test_sending_is_queued(relay):
    box = relay.create_mailbox()
    sent = relay.send_message(box.id, to=["someone@example.com"], subject="Hello", text="Hi")
    assert sent.status == "queued" and sent.id > 0


def sending_relay(processes, sink, *, login: str) -> Relay:
    """A client of its own web process, with a worker and a mailer sending through `sink`."""
    processes.env["EMAIL_URL"] = f"smtp://127.0.0.1:{sink[1]}"
    processes.worker("sender")
    processes.mailer("mailer")
    base = processes.start_web()
    _, key = account_create_with_key(login=login, plan="pro")
    return Relay(base, key)


def test_wait_for_delivery_ends_when_every_recipient_is_final(processes, sink, smtp_server):
    relay = sending_relay(processes, sink, login="deliverer")
    box = relay.create_mailbox()
    sent = relay.send_message(box.id, to=["ana@example.com", "bo@example.com"], subject="Hello", text="Hi")
    report = relay.wait_for_delivery(box.id, sent.message_id, timeout_seconds=30)
    assert report.final is True
    assert [(row.recipient, row.status, row.smtp_code) for row in report.delivery] == [
        ("ana@example.com", "sent", 250), ("bo@example.com", "sent", 250)]
    send_mail(smtp_server.port, box.address, "Hi", "hello")
    received = relay.wait_for_message(box.id, timeout_seconds=10)
    with pytest.raises(RelayError) as refused:
        relay.wait_for_delivery(box.id, received.id, timeout_seconds=1)
    assert refused.value.code == "not_found"


def test_a_conversation_replied_forwarded_and_read_as_a_thread(relay, smtp_server):
    box = relay.create_mailbox()
    send_mail(smtp_server.port, box.address, "Invoice", "Please confirm.")
    received = relay.wait_for_message(box.id, timeout_seconds=10)
    sent = relay.send_message(box.id, to=["a@example.com"], subject="Files", text="Attached.", cc=["c@example.com"],
                              bcc=["b@example.com"], attachments=[("a.bin", "application/octet-stream", b"\x00\x01")])
    replied = relay.reply_to_message(box.id, received.id, "Confirmed.", html="<p>Confirmed.</p>")
    forwarded = relay.forward_message(box.id, received.id, ["boss@example.com"], text="FYI")
    # A wait after mail the mailbox sent is about mail received: nothing new came.
    assert relay.wait_for_message(box.id, timeout_seconds=1, after=received.id) is None
    assert [m.direction for m in relay.list_messages(box.id, direction="out")] == ["out"] * 3
    files = relay.get_message(box.id, sent.message_id)
    assert files.cc == "c@example.com" and files.outbox_status == "queued" and files.attachments[0].filename == "a.bin"
    threads = relay.list_threads(box.id)
    assert [(t.subject, t.message_count) for t in threads] == [("Invoice", 3), ("Files", 1)]  # newest activity first
    whole = relay.get_thread(box.id, threads[0].id)
    assert [m.id for m in whole.messages] == [received.id, replied.message_id, forwarded.message_id]
    assert relay.get_message(box.id, replied.message_id).in_reply_to == received.message_id
    with pytest.raises(RelayError) as missing:
        relay.reply_to_message(box.id, received.id + 1000, "x")
    assert (missing.value.code, missing.value.status) == ("not_found", 404)


def test_the_event_stream_yields_messages_then_the_end(relay, smtp_server):
    box = relay.create_mailbox()
    events = relay.events(box.id)
    threading.Timer(1.0, send_mail, (smtp_server.port, box.address, "First", "one")).start()
    first = next(events)
    assert first.event == "message" and first.data["subject"] == "First" and first.id == str(first.data["id"])
    threading.Timer(0.5, relay.delete_mailbox, (box.id,)).start()
    last = next(events)
    assert last.event == "expired" and last.data == {"id": box.id, "status": "deleted"}
    assert next(events, None) is None


def test_webhook_signatures_are_verified():
    secret, body, now = new_secret(), b'{"type":"message.received"}', int(time.time())
    headers = {"webhook-id": "msg_1", "webhook-timestamp": str(now), "webhook-signature": sign(secret, "msg_1", now,
                                                                                              body)}
    assert verify_webhook(body, headers, secret)
    assert not verify_webhook(body + b" ", headers, secret)
    assert not verify_webhook(body, {**headers, "webhook-timestamp": str(now - 3600)}, secret)
    assert not verify_webhook(body, headers, "whsec_" + base64.b64encode(b"another key").decode())


def test_a_429_is_retried_after_its_retry_after(processes, smtp_server):
    base = processes.start_web(env={"RELAY_MAX_OPEN_WAITS": "1"})
    _, key = account_create_with_key(login="busy", plan="pro")
    statuses = []
    relay = Relay(base, key, retries=5)
    relay.session.hooks["response"].append(lambda response, *a, **k: statuses.append(response.status_code))
    box = relay.create_mailbox()
    other = Relay(base, key)
    store = redis.Redis.from_url(settings.RELAY_EVENTS_REDIS_URL)
    holding = threading.Thread(target=other.wait_for_message, args=(box.id,), kwargs={"timeout_seconds": 3})
    holding.start()
    wait_until(lambda: sum(store.zcard(name) for name in store.scan_iter("relay:open-waits:*")) == 1,
               timeout=10, message="the other wait to take the one place")
    assert relay.wait_for_message(box.id, timeout_seconds=1) is None
    holding.join()
    assert 429 in statuses and statuses[-1] == 200, statuses


def test_an_error_names_each_bad_fields_reason_in_its_text(relay):
    with pytest.raises(RelayError) as refused:
        relay.create_mailbox(local_part="Not Valid!")
    assert refused.value.code == "invalid_request" and "local_part" in refused.value.fields
    assert str(refused.value).startswith("invalid_request: ") and "local_part: " in str(refused.value)


def test_a_lifetime_refused_is_said_in_the_minutes_the_caller_gave(relay):
    with pytest.raises(RelayError) as too_short:
        relay.create_mailbox(ttl_minutes=1)
    box = relay.create_mailbox(ttl_minutes=10)
    with pytest.raises(RelayError) as too_long:
        relay.renew_mailbox(box.id, ttl_minutes=2000)  # over pro's day
    for refused in (too_short.value, too_long.value):
        assert refused.code == "invalid_request" and list(refused.fields) == ["ttl_minutes"], refused.fields
        assert "ttl_ms" not in str(refused) and "ttl_minutes: " in str(refused)
    assert "greater than or equal to 5 minutes" in str(too_short.value) and "300000" not in str(too_short.value)
    assert "between 5 and 1440 minutes on the pro plan" in str(too_long.value), str(too_long.value)


def test_the_fixture_takes_its_mailboxs_lifetime_and_address_from_a_marker(live, tmp_path):
    base, key = live
    (tmp_path / "test_marked.py").write_text(textwrap.dedent("""
        import datetime, pytest

        @pytest.mark.relay_mailbox(ttl_minutes=7, local_part="marked-box")
        def test_marked(relay_mailbox):
            left = relay_mailbox.expires_at - datetime.datetime.now(datetime.timezone.utc)
            assert relay_mailbox.address.startswith("marked-box@")
            assert datetime.timedelta(minutes=6) < left <= datetime.timedelta(minutes=7)
    """))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:django",
                           str(tmp_path / "test_marked.py")], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env={"RELAY_URL": base, "RELAY_API_KEY": key, "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_fixture_deletes_its_mailbox_even_when_the_test_fails(live, tmp_path):
    base, key = live
    (tmp_path / "test_inner.py").write_text(textwrap.dedent("""
        def test_fails(relay_mailbox, tmp_path_factory):
            open(%r, "w").write(relay_mailbox.id)
            assert relay_mailbox.address and relay_mailbox.messages() == []
            assert False, "the test fails"
    """ % str(tmp_path / "id.txt")))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:django",
                           str(tmp_path / "test_inner.py")], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={"RELAY_URL": base, "RELAY_API_KEY": key, "PATH": "/usr/bin:/bin"})
    assert done.returncode == 1 and "the test fails" in done.stdout, done.stdout + done.stderr
    mailbox_id = (tmp_path / "id.txt").read_text()
    with pytest.raises(RelayError) as gone:
        Relay(base, key).get_mailbox(mailbox_id)
    assert gone.value.code == "not_found"


def test_the_sandbox_fixture_gives_django_settings_and_deletes_its_sandbox(live, tmp_path):
    base, key = live
    (tmp_path / "test_inner.py").write_text(textwrap.dedent("""
        def test_fails(relay_sandbox):
            open(%r, "w").write(relay_sandbox.id)
            configured = relay_sandbox.django_settings(use_tls=False)
            assert configured["EMAIL_HOST_USER"] == relay_sandbox.address
            assert configured["EMAIL_HOST_PASSWORD"].startswith("rs_") and configured["EMAIL_USE_TLS"] is False
            assert False, "the test fails"
    """ % str(tmp_path / "id.txt")))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:django",
                           str(tmp_path / "test_inner.py")], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={"RELAY_URL": base, "RELAY_API_KEY": key, "PATH": "/usr/bin:/bin"})
    assert done.returncode == 1 and "the test fails" in done.stdout, done.stdout + done.stderr
    with pytest.raises(RelayError) as gone:
        Relay(base, key).get_mailbox((tmp_path / "id.txt").read_text())
    assert gone.value.code == "not_found"


def test_the_client_is_typed_and_depends_on_requests_only():
    metadata = (ROOT / "client" / "pyproject.toml").read_text()
    assert 'dependencies = ["requests>=2.28"]' in metadata
    assert (ROOT / "client" / "relay_client" / "py.typed").exists()


def test_check_message_gives_each_check_as_the_api_answers_it(checking_web, smtp_server):
    from tests.mail_corpus import newsletter, send

    base, site = checking_web
    _, key = account_create_with_key(login="checker", plan="pro")
    relay = Relay(base, key)
    box = relay.create_mailbox()
    send(smtp_server.port, box.address, newsletter(box.address, links=[f"{site.url}/ok", f"{site.url}/gone"]))
    message = relay.wait_for_message(box.id, timeout_seconds=10)
    found = relay.check_message(box.id, message.id)
    only_spam = relay.check_message(box.id, message.id, checks=["spam"])
    assert list(found) == ["html", "links", "spam", "headers"]
    assert found["links"]["status"] == "done" and [link["ok"] for link in found["links"]["links"]] == [True, False]
    assert found["html"]["score"]["overall"] < 1 and found["spam"]["is_spam"] is False
    assert [check["name"] for check in found["headers"]["checks"]][0] == "list_unsubscribe"
    assert list(only_spam) == ["spam"]


def test_check_message_names_a_check_this_relay_cannot_run(relay, smtp_server):
    box = relay.create_mailbox()
    send_mail(smtp_server.port, box.address, "Hello", "plain")
    message = relay.wait_for_message(box.id, timeout_seconds=10)
    found = relay.check_message(box.id, message.id, checks=["spam", "headers"])
    assert found["spam"] == {"error": "not_configured: No spam checker is configured here (RELAY_SPAMD_URL is not "
                                      "set)."}
    assert {check["name"] for check in found["headers"]["checks"]} >= {"message_id", "date"}


def test_a_sandbox_from_the_client_takes_djangos_send_mail_with_a_bcc(processes, certificates, settings,
                                                                       transactional_db):
    """create_sandbox() against a live web process that names the submission port, and
    Django's own SMTP EmailBackend configured from django_settings() over STARTTLS."""
    import ssl

    from django.core.mail import EmailMessage, get_connection

    from tests.conftest import SmtpServerThread
    from tests.ports import free_port

    port = free_port()
    # The web process names the security the SMTP process offers: it has the certificate too.
    base = processes.start_web("sandbox-web", env={
        "RELAY_SUBMISSION_PORT": str(port), "RELAY_SMTP_TLS_CERT": str(certificates / "server.pem"),
        "RELAY_SMTP_TLS_KEY": str(certificates / "server.key")})
    _, key = account_create_with_key(login="app-tester", plan="pro")
    settings.RELAY_SMTP_TLS_CERT = str(certificates / "server.pem")
    settings.RELAY_SMTP_TLS_KEY = str(certificates / "server.key")
    submission = SmtpServerThread(submission_port=port).start()
    relay = Relay(base, key)
    try:
        sandbox = relay.create_sandbox(ttl_minutes=10)
        assert sandbox.smtp["port"] == port and sandbox.smtp["username"] == sandbox.address
        configured = sandbox.django_settings()
        assert configured["EMAIL_USE_TLS"] is True
        backend = get_connection(configured["EMAIL_BACKEND"], host=configured["EMAIL_HOST"],
                                 port=configured["EMAIL_PORT"], username=configured["EMAIL_HOST_USER"],
                                 password=configured["EMAIL_HOST_PASSWORD"], use_tls=configured["EMAIL_USE_TLS"],
                                 timeout=10)
        backend.ssl_context = ssl.create_default_context(cafile=str(certificates / "ca.pem"))  # the test's CA
        EmailMessage("Your receipt", "Thanks", "shop@staging.example", ["alice@customer.example"],
                     bcc=["books@staging.example"], connection=backend).send()
        caught = relay.wait_for_message(sandbox.id, timeout_seconds=20)
        assert caught is not None and caught.subject == "Your receipt"
        assert relay.get_message(sandbox.id, caught.id).envelope["rcpt_to"] == ["alice@customer.example",
                                                                              "books@staging.example"]
    finally:
        submission.stop()
        relay.delete_mailbox(sandbox.id)


def test_a_catch_is_found_by_its_envelope_recipient_and_released_to_one_address(processes, sink, transactional_db,
                                                                                no_auth_failures):
    """rcpt on list_messages and wait_for_message, then Sandbox.release through real mailer
    and worker processes to an SMTP sink, followed with wait_for_delivery."""
    import smtplib

    from tests.conftest import SmtpServerThread

    relay = sending_relay(processes, sink, login="releaser")
    submission = SmtpServerThread(submission=True).start()
    sandbox = relay.create_sandbox(ttl_minutes=10)
    try:
        receipt = b"From: shop@staging.example\r\nTo: alice@customer.example\r\nSubject: Receipt\r\n\r\nThanks\r\n"
        with smtplib.SMTP("127.0.0.1", submission.submission_port, timeout=10) as smtp:
            smtp.ehlo()
            smtp.user, smtp.password = sandbox.smtp["username"], sandbox.smtp["password"]
            smtp.auth("PLAIN", smtp.auth_plain)
            smtp.sendmail("shop@staging.example", ["alice@customer.example", "books@staging.example"], receipt)
            smtp.sendmail("shop@staging.example", ["bob@customer.example"], receipt.replace(b"alice", b"bob"))
        caught = relay.wait_for_message(sandbox.id, timeout_seconds=20, rcpt="Books@Staging.example")
        assert caught is not None and caught.envelope["rcpt_to"] == ["alice@customer.example", "books@staging.example"]
        [to_bob] = relay.list_messages(sandbox.id, rcpt="bob@customer.example")
        assert to_bob.id != caught.id and relay.list_messages(sandbox.id, rcpt="carol@customer.example") == []

        sent = sandbox.release(caught.id, ["qa@team.example"])
        assert sent.status == "queued"
        report = relay.wait_for_delivery(sandbox.id, sent.message_id, timeout_seconds=60)
        assert [(row.recipient, row.status, row.smtp_code) for row in report.delivery] == [
            ("qa@team.example", "sent", 250)]
        [envelope] = sink[0].received
        assert envelope.rcpt_tos == ["qa@team.example"]
        assert envelope.original_content.endswith(b"\r\n" + relay.get_raw(sandbox.id, caught.id))
        with pytest.raises(RelayError) as refused:
            relay.release_message(sandbox.id, sent.message_id, ["qa@team.example"])
        assert (refused.value.code, refused.value.status) == ("conflict", 409)
    finally:
        submission.stop()
        relay.delete_mailbox(sandbox.id)
