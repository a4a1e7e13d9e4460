"""The JMAP reader (relay/mailserver/) on the Stalwart backend, against the Stalwart
stand-in's JMAP mail calls: the same reader Cyrus uses, stored once whatever is replayed,
and a server that fails costing a read nothing but freshness."""

from mailboxes.models import Mailbox, Message
from relay import mailserver
from relay.mailserver import reader
from tests import mail_corpus as corpus
from tests.helpers import create_via_api, listed
from tests.stalwart_fake import HTTP_503


def mail(subject: str) -> bytes:
    """A mail as the mail server holds it: with the Return-Path its delivery added."""
    held = corpus.mail(subject=subject, text=f"{subject}: your code is 246810.")
    return b"Return-Path: <bounce@example.com>\r\n" + held


def subjects(client, box) -> list[str]:
    return sorted(listed(client.get(f"/api/v1/mailboxes/{box['id']}/messages"), "subject"))


def test_stalwart_mail_is_read_by_the_same_reader_and_stored_once(stalwart, client_pro, monkeypatch):
    box = create_via_api(client_pro, local_part="stalwart-reader").json()
    account = Mailbox.objects.get(id=box["id"]).backend_id
    stalwart.deliver(account, mail("One"))
    assert subjects(client_pro, box) == ["One"]  # read at once, before the list
    item = client_pro.get(f"/api/v1/mailboxes/{box['id']}/messages").json()["results"][0]
    assert item["envelope_from"] == "bounce@example.com"
    detail = client_pro.get(f"/api/v1/mailboxes/{box['id']}/messages/{item['id']}").json()
    assert detail["codes"] == ["246810"]

    stalwart.deliver(account, mail("Two"))
    stalwart.deliver(account, mail("Three"))
    assert mailserver.poll() == 2 and mailserver.poll() == 0
    # The server forgets the state it gave (or it is replayed from scratch): the mailbox is
    # read whole again, and nothing is stored twice.
    Mailbox.objects.filter(id=box["id"]).update(server_state="999")
    assert mailserver.poll() == 0
    Mailbox.objects.filter(id=box["id"]).update(server_state="", server_marker="")
    assert mailserver.poll() == 0
    assert Message.objects.filter(mailbox_id=box["id"]).count() == 3
    assert subjects(client_pro, box) == ["One", "Three", "Two"]

    # A batch of changes larger than one answer holds is read over several rounds.
    monkeypatch.setattr(reader, "MAX_CHANGES", 2)
    for i in range(5):
        stalwart.deliver(account, mail(f"Burst {i}"))
    assert mailserver.poll() == 5
    assert Message.objects.filter(mailbox_id=box["id"]).count() == 8


def test_a_failing_server_leaves_reads_answering_from_what_is_stored(stalwart, client_pro):
    box = create_via_api(client_pro, local_part="stalwart-outage").json()
    account = Mailbox.objects.get(id=box["id"]).backend_id
    stalwart.deliver(account, mail("Stored"))
    assert subjects(client_pro, box) == ["Stored"]
    stalwart.deliver(account, mail("Delivered during the outage"))
    stalwart.fail(HTTP_503)
    assert subjects(client_pro, box) == ["Stored"]  # 200, from what is stored
    stalwart.fail(HTTP_503, times=0)
    reader.forget_failures()  # as if the quiet time after a failure were over
    assert mailserver.poll() == 1
    assert subjects(client_pro, box) == ["Delivered during the outage", "Stored"]


def test_two_readers_at_once_store_each_message_once(stalwart, transactional_db, make_client, monkeypatch):
    import threading

    from django.db import connection

    client = make_client("racer")
    box = create_via_api(client, local_part="two-readers").json()
    account = Mailbox.objects.get(id=box["id"]).backend_id
    for i in range(5):
        stalwart.deliver(account, mail(f"Raced {i}"))
    # Both readers reach the store with the same messages in hand before either stores one.
    together = threading.Barrier(2, timeout=10)
    deliver = reader.message_ingest
    met = set()

    def store_after_meeting(**kwargs):
        if threading.get_ident() not in met:
            met.add(threading.get_ident())
            together.wait()
        return deliver(**kwargs)

    monkeypatch.setattr(reader, "message_ingest", store_after_meeting)
    outcomes = []

    def read(how) -> None:
        try:
            outcomes.append(how())
        finally:
            connection.close()

    readers = [threading.Thread(target=read, args=(mailserver.poll,)),
               threading.Thread(target=read, args=(lambda: reader._read(reader.mail_store(), reader._readings(
                   reader.mail_store(), Mailbox.objects.filter(id=box["id"]), None)),))]
    for thread in readers:
        thread.start()
    for thread in readers:
        thread.join(30)
    assert len(met) == 2, "the two readers did not overlap"
    assert sum(outcomes) == 5 and Message.objects.filter(mailbox_id=box["id"]).count() == 5
    assert Mailbox.objects.get(id=box["id"]).message_count == 5
