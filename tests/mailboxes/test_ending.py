"""How a mailbox stops (mailboxes.ending), called directly: lazy expiry."""
from mailboxes.ending import mailbox_lazy_expire
from mailboxes.models import CleanupState, Mailbox, MailboxStatus
from tests.helpers import make_mailbox


def test_lazy_expiry_ends_a_due_mailbox_once_and_owes_its_cleanup(db):
    due, live = make_mailbox("lazy-due", due=True), make_mailbox("lazy-live")
    assert mailbox_lazy_expire(mailbox=live).status == MailboxStatus.ACTIVE
    ended = mailbox_lazy_expire(mailbox=due)
    assert ended.status == MailboxStatus.EXPIRED and ended.cleanup_state == CleanupState.PENDING
    claim = Mailbox.objects.get(id=due.id).cleanup_claim
    assert claim is not None
    mailbox_lazy_expire(mailbox=Mailbox.objects.get(id=due.id))
    assert Mailbox.objects.get(id=due.id).cleanup_claim == claim, "an ended mailbox was ended a second time"
