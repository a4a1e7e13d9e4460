"""The inbound SMTP server on a real socket, driven by smtplib."""
import smtplib
import socket
import threading
from datetime import timedelta

import pytest
from django.utils import timezone

from mailboxes.models import Mailbox, Message
from tests import mail_corpus
from tests.helpers import create_via_api, earlier, wait_until


@pytest.fixture
def owner(client_pro):
    return client_pro


@pytest.fixture
def new_box(owner):
    """Makes a mailbox through the API and returns its JSON."""
    def make(local_part: str, ttl_ms: int = 600_000) -> dict:
        response = create_via_api(owner, local_part=local_part, ttl_ms=ttl_ms)
        assert response.status_code == 201
        return response.json()

    return make


def connect(server) -> smtplib.SMTP:
    smtp = smtplib.SMTP("127.0.0.1", server.port, timeout=10)
    smtp.ehlo()
    return smtp


def send(server, to, raw: bytes, mail_from: str = "sender@example.com"):
    with connect(server) as smtp:
        return smtp.sendmail(mail_from, to, raw)


def messages(owner, mailbox) -> list:
    return owner.get(f"/api/v1/mailboxes/{mailbox['id']}/messages").json()["results"]


def test_delivered_mail_is_readable_through_the_api_at_once(smtp_server, owner, new_box):
    box = new_box("inbox")
    send(smtp_server, [box["address"]], mail_corpus.plain(box["address"]))
    # No waiting: a 250 to DATA means the message is committed.
    listed = messages(owner, box)
    assert len(listed) == 1
    assert set(listed[0]) == {"id", "mailbox_id", "from", "to", "envelope_from", "envelope_to", "subject",
                              "received_at", "size", "is_read", "has_attachments", "authenticated", "direction",
                              "thread_id", "rcpt_to"}
    assert listed[0]["subject"] == "Plain hello" and listed[0]["is_read"] is False
    assert (listed[0]["envelope_from"], listed[0]["envelope_to"]) == ("sender@example.com", box["address"])
    assert owner.get(f"/api/v1/mailboxes/{box['id']}").json()["message_count"] == 1


@pytest.mark.parametrize("case", ["unknown", "foreign_domain", "expired", "past_expires_at", "deleted"])
def test_refused_at_rcpt_with_550_5_1_1(smtp_server, owner, new_box, case):
    box = new_box("target")
    address = box["address"]
    if case == "unknown":
        address = "nobody@relay.localhost"
    elif case == "foreign_domain":
        address = "target@gmail.com"
    elif case == "expired":
        Mailbox.objects.filter(id=box["id"]).update(status="expired")
    elif case == "past_expires_at":
        # Still "active" in the table: no worker has run. RCPT must check the clock itself.
        Mailbox.objects.filter(id=box["id"]).update(expires_at=timezone.now() - timedelta(seconds=1))
    elif case == "deleted":
        owner.delete(f"/api/v1/mailboxes/{box['id']}")
    with connect(smtp_server) as smtp:
        smtp.mail("sender@example.com")
        code, reply = smtp.rcpt(address)
    assert (code, reply[:5]) == (550, b"5.1.1")
    assert not Message.objects.exists()
    if case == "past_expires_at":
        assert Mailbox.objects.get(id=box["id"]).status == "expired"


def test_a_mailbox_passing_expires_at_between_two_messages_refuses_the_second(smtp_server, new_box):
    box = new_box("shortlived", ttl_ms=300_000)
    raw = mail_corpus.plain(box["address"])
    with connect(smtp_server) as smtp:
        assert smtp.sendmail("a@example.com", [box["address"]], raw) == {}
        # Five minutes and a second on, by the database's clock, which decides.
        earlier(Mailbox.objects.filter(id=box["id"]), timedelta(minutes=5, seconds=1), "expires_at")
        smtp.mail("a@example.com")
        code, reply = smtp.rcpt(box["address"])
    assert (code, reply[:5]) == (550, b"5.1.1")
    assert Message.objects.count() == 1


def test_several_recipients_are_delivered_to_each_accepted_mailbox(smtp_server, owner, new_box):
    one, two = new_box("one"), new_box("two")
    refused = send(smtp_server, [one["address"], "ghost@relay.localhost", two["address"], one["address"].upper()],
                   mail_corpus.plain("many"))
    assert list(refused) == ["ghost@relay.localhost"]
    assert len(messages(owner, one)) == 1 and len(messages(owner, two)) == 1


def test_never_relays(smtp_server):
    with connect(smtp_server) as smtp:
        smtp.mail("spammer@example.com")
        assert smtp.rcpt("victim@example.org")[0] == 550
        with pytest.raises(smtplib.SMTPDataError):  # no accepted recipient: DATA is refused
            smtp.data(b"Subject: x\r\n\r\nx\r\n")


def test_oversize_is_552_5_3_4_and_the_server_keeps_serving(smtp_server, owner, new_box, settings):
    settings.RELAY_MAX_MESSAGE_BYTES = 20_000
    box = new_box("small")
    big = mail_corpus.plain(box["address"]) + (b"x" * 70 + b"\r\n") * 500
    with connect(smtp_server) as smtp:
        code, reply = smtp.mail("a@example.com", options=["SIZE=30000"])
        assert (code, reply[:5]) == (552, b"5.3.4")
    with connect(smtp_server) as smtp:  # no SIZE declared: caught while reading DATA
        smtp.mail("a@example.com")
        smtp.rcpt(box["address"])
        code, reply = smtp.data(big)
        assert (code, reply[:5]) == (552, b"5.3.4")
    assert send(smtp_server, [box["address"]], mail_corpus.plain(box["address"])) == {}
    assert len(messages(owner, box)) == 1


def test_too_many_recipients_are_refused_with_452(smtp_server, new_box, settings):
    settings.RELAY_SMTP_MAX_RECIPIENTS = 2
    boxes = [new_box(f"r{i}") for i in range(3)]
    with connect(smtp_server) as smtp:
        smtp.mail("a@example.com")
        codes = [smtp.rcpt(box["address"])[0] for box in boxes]
    assert codes == [250, 250, 452]


def test_a_session_cannot_outlast_its_time_limit(smtp_server, settings):
    settings.RELAY_SMTP_SESSION_SECONDS = 1
    smtp = connect(smtp_server)

    def closed() -> bool:
        try:
            smtp.noop()
            return False
        except (smtplib.SMTPServerDisconnected, ConnectionError):
            return True

    wait_until(closed, timeout=10, interval=0.2, message="the server to end the session")


@pytest.mark.parametrize("shape", sorted(mail_corpus.REAL_WORLD))
def test_raw_round_trip_is_byte_exact(smtp_server, owner, new_box, shape):
    box = new_box(f"rt-{shape.replace('_', '-')}")
    raw = mail_corpus.REAL_WORLD[shape](box["address"])
    send(smtp_server, [box["address"]], raw)
    message_id = messages(owner, box)[0]["id"]
    response = owner.get(f"/api/v1/mailboxes/{box['id']}/messages/{message_id}/raw")
    assert response.status_code == 200
    assert response["Content-Type"] == "message/rfc822"
    assert response.content == raw


def test_parsed_fields_of_real_world_messages(smtp_server, owner, new_box):
    box = new_box("parsed")
    for build in mail_corpus.REAL_WORLD.values():
        send(smtp_server, [box["address"]], build(box["address"]))
    by_subject = {}
    for summary in messages(owner, box):
        detail = owner.get(f"/api/v1/mailboxes/{box['id']}/messages/{summary['id']}").json()
        by_subject[detail["subject"]] = detail
    alt = by_subject["🎉 Welcome to Relay"]
    assert alt["from"] == "Jürgen Müller <jm@example.de>"
    assert alt["text"].strip() == "Your code is 4821. ✓" and "<b>4821</b>" in alt["html"]
    invoice = by_subject["Your invoice"]
    listed = invoice["attachments"]
    assert [item.pop("download_url").endswith(f"/messages/{invoice['id']}/attachments/{item['id']}")
            for item in listed] == [True, True]
    assert listed == [
        {"id": 1, "filename": "invoice.pdf", "content_type": "application/pdf", "size": len(mail_corpus.PDF),
         "content_id": None},
        # The decoded payload: Python's parser gives text parts "\n" line ends.
        {"id": 2, "filename": "résumé.csv", "content_type": "text/csv", "size": len("a,b\n1,2\n"), "content_id": None},
    ]
    news = by_subject["Newsletter"]
    assert news["attachments"][0].pop("download_url").endswith(f"/messages/{news['id']}/attachments/1")
    assert news["attachments"] == [{"id": 1, "filename": None, "content_type": "image/png",
                                    "size": len(mail_corpus.PNG), "content_id": "logo@example.com"}]
    assert 'cid:logo@example.com' in news["html"]
    russian = by_subject["Привет"]
    assert russian["from"] == "François <f@example.fr>" and "Grüße aus Köln" in russian["text"]
    assert ["Message-ID", "<plain-1@example.com>"] in by_subject["Plain hello"]["headers"]


def test_reading_a_message_marks_it_read_and_delete_removes_it(smtp_server, owner, new_box):
    box = new_box("reader")
    send(smtp_server, [box["address"]], mail_corpus.plain(box["address"]))
    message_id = messages(owner, box)[0]["id"]
    url = f"/api/v1/mailboxes/{box['id']}/messages/{message_id}"
    detail = owner.get(url).json()
    assert {"text", "html", "headers", "attachments"} <= set(detail)
    assert messages(owner, box)[0]["is_read"] is True
    assert owner.delete(url).status_code == 204
    assert owner.get(url).status_code == 404
    assert owner.delete(url).status_code == 404
    assert owner.get(f"/api/v1/mailboxes/{box['id']}").json()["message_count"] == 0


# The one malformed shape SMTP itself refuses: a line longer than RFC 5321 allows
# (answered 500, nothing stored). Every other one is stored raw with what could be parsed.
REFUSED_MALFORMED = {"header_line_over_998_bytes": 500}


@pytest.mark.parametrize("name", sorted(mail_corpus.malformed("x@relay.localhost")))
def test_malformed_messages_are_stored_raw_or_refused_cleanly(smtp_server, owner, new_box, name):
    box = new_box("bad-" + name.replace("_", "-")[:50])
    raw = mail_corpus.malformed(box["address"])[name]
    if name in REFUSED_MALFORMED:
        with pytest.raises(smtplib.SMTPResponseException) as refusal:
            send(smtp_server, [box["address"]], raw)
        assert refusal.value.smtp_code == REFUSED_MALFORMED[name]
        assert messages(owner, box) == []
    else:
        assert send(smtp_server, [box["address"]], raw) == {}
        stored = messages(owner, box)
        assert len(stored) == 1
        detail = owner.get(f"/api/v1/mailboxes/{box['id']}/messages/{stored[0]['id']}")
        assert detail.status_code == 200
        raw_back = owner.get(f"/api/v1/mailboxes/{box['id']}/messages/{stored[0]['id']}/raw").content
        if b"\r" not in raw.replace(b"\r\n", b""):  # lone CRs are the one thing SMTP lines may change
            assert raw_back == raw
    # The server is still serving.
    assert send(smtp_server, [box["address"]], mail_corpus.plain(box["address"])) == {}


def test_a_line_over_the_smtp_limit_is_refused_not_truncated(smtp_server, owner, new_box):
    box = new_box("longline")
    with connect(smtp_server) as smtp:
        smtp.mail("a@example.com")
        smtp.rcpt(box["address"])
        code, _ = smtp.data(b"Subject: long\r\n\r\n" + b"x" * 30_000 + b"\r\n")
    assert code == 500
    assert messages(owner, box) == []


def test_garbage_on_the_wire_does_not_crash_the_server(smtp_server, new_box):
    box = new_box("survivor")
    with socket.create_connection(("127.0.0.1", smtp_server.port), timeout=5) as raw_socket:
        raw_socket.recv(1024)
        raw_socket.sendall(b"\x00\xff\xfe garbage\r\nRCPT TO:<>\r\nMAIL FROM:<<<>>>\r\n" + b"A" * 5000 + b"\r\nDATA\r\n")
        raw_socket.recv(4096)
    assert send(smtp_server, [box["address"]], mail_corpus.plain(box["address"])) == {}


def test_shutdown_waits_for_a_message_in_flight_and_keeps_it(transactional_db, new_box, monkeypatch):
    from relay.inbound import server as relay_smtp
    from tests.conftest import SmtpServerThread

    box = new_box("inflight")
    storing, release = threading.Event(), threading.Event()
    deliver = relay_smtp.message_ingest

    def slow_deliver(**kwargs):
        storing.set()
        assert release.wait(10)
        return deliver(**kwargs)

    monkeypatch.setattr(relay_smtp, "message_ingest", slow_deliver)
    server = SmtpServerThread().start()
    result = {}
    def send_one() -> None:
        try:
            smtp = connect(server)
            result["refused"] = smtp.sendmail("a@example.com", [box["address"]], mail_corpus.plain("x"))
            smtp.close()  # no QUIT: the server is going away, and says so
        except Exception as exc:  # shown in the assertion below
            result["error"] = repr(exc)

    sender = threading.Thread(target=send_one)
    sender.start()
    assert storing.wait(10)
    server.loop.call_soon_threadsafe(server.stop_event.set)  # SIGTERM arrives mid-DATA
    wait_until(lambda: _refuses_connections(server.port), timeout=5, message="the listener to close")
    release.set()
    sender.join(10)
    server.thread.join(15)
    assert result == {"refused": {}}  # the client heard 250 ...
    assert Message.objects.filter(mailbox_id=box["id"]).count() == 1  # ... and the message is kept


def _refuses_connections(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return False
    except OSError:
        return True
