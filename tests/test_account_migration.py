"""Owners and keys from before accounts existed become active accounts, keys intact
(accounts.0001 takes over mailboxes' tables), and sent mail becomes the outbox."""
import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

BEFORE = [("mailboxes", "0004_owner_live_mailboxes")]


@pytest.mark.django_db(transaction=True)
def test_owners_keys_and_sent_mail_migrate_into_accounts_and_the_outbox():
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes()
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    Owner, ApiKey = old.get_model("mailboxes", "Owner"), old.get_model("mailboxes", "ApiKey")
    Mailbox, Outbound = old.get_model("mailboxes", "Mailbox"), old.get_model("mailboxes", "OutboundMessage")
    owner = Owner.objects.create(name="Old Owner 1", plan="pro", live_mailboxes=1)
    ApiKey.objects.create(owner=owner, prefix="rk_abcdefg", key_hash="a" * 64)
    mailbox = Mailbox.objects.create(owner=owner, address="old@relay.localhost",
                                     expires_at=timezone.now() + timezone.timedelta(hours=1))
    Outbound.objects.create(mailbox=mailbox, to=["x@example.com"], subject="s", text="t", status="sent")

    executor = MigrationExecutor(connection)
    executor.migrate(latest)
    new = executor.loader.project_state(latest).apps
    Account, NewKey = new.get_model("accounts", "Account"), new.get_model("accounts", "ApiKey")
    account = Account.objects.get(login="Old Owner 1")
    assert (account.status, account.plan, account.live_mailboxes) == ("active", "pro", 1)
    assert account.activated_at == account.created_at == account.status_changed_at
    assert NewKey.objects.get(account=account).key_hash == "a" * 64
    assert new.get_model("mailboxes", "Mailbox").objects.get(address="old@relay.localhost").owner_id == account.id
    mail = new.get_model("relay", "OutboxMail").objects.get()
    assert (mail.kind, mail.status, mail.from_email) == ("send", "sent", "old@relay.localhost")


@pytest.mark.django_db(transaction=True)
def test_rows_from_before_codes_links_wire_bytes_and_message_owners_get_them_filled():
    before = [("mailboxes", "0013_read_from_the_mail_server"), ("relay", "0003_backendcallslot")]
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes()
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    Mailbox, Content = old.get_model("mailboxes", "Mailbox"), old.get_model("mailboxes", "MessageContent")
    mailbox = Mailbox.objects.create(address="older@relay.localhost", expires_at=timezone.now())
    content = Content.objects.create(raw=b"", text="Your code is 482913. https://shop.example/confirm")
    OldMessage = old.get_model("mailboxes", "Message")
    OldMessage.objects.create(mailbox=mailbox, content=content, subject="Sign in", size=1)
    account = old.get_model("accounts", "Account").objects.create(login="older", status="active")
    owned, deleted = (Mailbox.objects.create(owner=account, address=f"{name}@relay.localhost", expires_at=timezone.now(),
                                             status=status) for name, status in (("owned", "expired"), ("gone", "deleted")))
    for box in (owned, deleted):
        OldMessage.objects.create(mailbox=box, content=content, subject=box.status, size=1)
    Outbox = old.get_model("relay", "OutboxMail")
    owed = Outbox.objects.create(to=["x@example.com"], subject="Hello", text="Hi", from_email="a@relay.localhost")
    sent = Outbox.objects.create(to=["x@example.com"], subject="Gone", text="", status="sent")

    executor = MigrationExecutor(connection)
    executor.migrate(latest)
    new = executor.loader.project_state(latest).apps
    filled = new.get_model("mailboxes", "MessageContent").objects.get(id=content.id)
    assert filled.codes == ["482913"]
    assert [link["url"] for link in filled.links] == ["https://shop.example/confirm"]
    mails = new.get_model("relay", "OutboxMail").objects
    assert b"Subject: Hello" in bytes(mails.get(id=owed.id).message)
    assert bytes(mails.get(id=sent.id).message) == b""
    # A visible mailbox's mail names its owner; a deleted or ownerless one's names none.
    owners = dict(new.get_model("mailboxes", "Message").objects.values_list("subject", "owner_id"))
    assert owners == {"Sign in": None, "expired": account.id, "deleted": None}
