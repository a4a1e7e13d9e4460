"""The operator's view of cleanups: mailboxes whose deprovisioning is owed or failed."""
from mailboxes.models import Mailbox


class Cleanup(Mailbox):
    class Meta:
        proxy = True
        verbose_name = "cleanup / dead letter"
        verbose_name_plural = "cleanups and dead letters"
