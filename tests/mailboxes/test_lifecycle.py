"""A mailbox's life (mailboxes.lifecycle), called directly: how it ends when due."""
from mailboxes.lifecycle import mailboxes_expire_due
from mailboxes.models import CleanupState, Mailbox, MailboxStatus
from tests.helpers import make_mailbox


def test_expiring_due_mailboxes_ends_each_once_and_owes_its_cleanup(db):
    due, live = make_mailbox("ending-due", due=True), make_mailbox("ending-live")
    assert mailboxes_expire_due(mailbox_ids=[due.id, live.id]) == [due.id]
    ended = Mailbox.objects.get(id=due.id)
    assert ended.status == MailboxStatus.EXPIRED and ended.cleanup_state == CleanupState.PENDING
    assert Mailbox.objects.get(id=live.id).status == MailboxStatus.ACTIVE
    assert mailboxes_expire_due(mailbox_ids=[due.id]) == [], "an ended mailbox was ended a second time"
    assert Mailbox.objects.get(id=due.id).cleanup_claim == ended.cleanup_claim
