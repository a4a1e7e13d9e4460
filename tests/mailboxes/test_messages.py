"""mailboxes/messages.py on its own, below every door: which mailbox takes mail at an
address now (`recipient_by_address`), and storing one message for its recipients
(`message_store`), with the quota and a mailbox that ended in between; then a message
marked read and deleted, its shared content kept for the other recipients."""
from datetime import timedelta

import pytest
from django.utils import timezone

from accounts.services import account_create_with_key, account_set_status
from mailboxes.models import CleanupState, Mailbox, MailboxStatus, Message, MessageContent
from mailboxes.messages import MailboxFull, message_delete, message_mark_read, message_store, recipient_by_address
from tests.helpers import make_mailbox


def content(raw: bytes = b"Subject: Hi\r\n\r\nHello\r\n") -> MessageContent:
    return MessageContent(raw=raw, text="Hello", headers=[["Subject", "Hi"]])


def store(recipients, raw: bytes = b"Subject: Hi\r\n\r\nHello\r\n") -> list[int]:
    return message_store(content=content(raw), envelope_from="a@example.com", from_header="a@example.com",
                         to_header="x@relay.localhost", subject="Hi", recipients=recipients)


def test_a_live_mailbox_takes_mail_at_its_address_whatever_its_case(db):
    mailbox = make_mailbox("live")
    found = recipient_by_address("  LIVE@Relay.Localhost ")
    assert found is not None and found.mailbox_id == mailbox.id and found.address == "live@relay.localhost"
    assert recipient_by_address("nobody@relay.localhost") is None
    assert recipient_by_address("not an address") is None


def test_a_mailbox_past_its_end_refuses_mail_and_is_expired_on_the_spot(db):
    mailbox = make_mailbox("ended", due=True)
    assert recipient_by_address(mailbox.address) is None
    mailbox.refresh_from_db()
    assert mailbox.status == MailboxStatus.EXPIRED and mailbox.cleanup_state == CleanupState.PENDING


def test_a_suspended_accounts_mailbox_refuses_mail(db):
    owner, _ = account_create_with_key(login="paused")
    mailbox = make_mailbox("paused", owner=owner)
    assert recipient_by_address(mailbox.address) is not None
    account_set_status(account=owner, status="suspended")
    assert recipient_by_address(mailbox.address) is None


def test_one_content_is_stored_for_every_recipient_and_counted_in_each(db):
    first, second = make_mailbox("first"), make_mailbox("second")
    raw = b"Subject: Hi\r\n\r\nHello\r\n"
    stored = store([recipient_by_address(first.address), recipient_by_address(second.address)], raw)
    assert len(stored) == 2 and MessageContent.objects.count() == 1
    for mailbox in (first, second):
        mailbox.refresh_from_db()
        assert (mailbox.message_count, mailbox.stored_bytes) == (1, len(raw))
    assert set(Message.objects.values_list("mailbox_id", flat=True)) == {first.id, second.id}


def test_a_mailbox_that_ended_after_its_look_up_takes_nothing(db):
    kept, gone = make_mailbox("kept"), make_mailbox("gone")
    recipients = [recipient_by_address(kept.address), recipient_by_address(gone.address)]
    Mailbox.objects.filter(id=gone.id).update(status=MailboxStatus.DELETED, deleted_at=timezone.now())
    stored = store(recipients)
    assert list(Message.objects.filter(id__in=stored).values_list("mailbox_id", flat=True)) == [kept.id]


def test_a_message_over_the_storage_quota_is_mailbox_full_and_stores_nothing(db, settings):
    settings.RELAY_QUOTAS = {**settings.RELAY_QUOTAS,
                             "free": {**settings.RELAY_QUOTAS["free"], "stored_bytes_per_mailbox": 100}}
    mailbox = make_mailbox("small", expires_at=timezone.now() + timedelta(minutes=5))
    with pytest.raises(MailboxFull):
        store([recipient_by_address(mailbox.address)], b"Subject: Big\r\n\r\n" + b"x" * 200 + b"\r\n")
    mailbox.refresh_from_db()
    assert (mailbox.message_count, mailbox.stored_bytes) == (0, 0) and not Message.objects.exists()


def test_a_message_deleted_leaves_the_content_another_recipient_shares_until_its_own_goes(db):
    first, second = make_mailbox("del-first"), make_mailbox("del-second")
    raw = b"Subject: Hi\r\n\r\nHello\r\n"
    mine, theirs = store([recipient_by_address(first.address), recipient_by_address(second.address)], raw)
    message = Message.objects.get(id=mine)
    message_mark_read(message=message)
    assert message.is_read and Message.objects.get(id=mine).is_read and not Message.objects.get(id=theirs).is_read
    assert message_delete(mailbox=first, message_id=mine)
    assert not message_delete(mailbox=first, message_id=mine), "a message was deleted twice"
    assert not message_delete(mailbox=first, message_id=theirs), "a message of another mailbox was deleted"
    first.refresh_from_db()
    assert (first.message_count, first.stored_bytes) == (0, 0)
    assert MessageContent.objects.count() == 1
    assert message_delete(mailbox=second, message_id=theirs)
    assert MessageContent.objects.count() == 0
