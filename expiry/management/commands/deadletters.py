from django.core.management.base import BaseCommand

from expiry.operators import cleanup_requeue
from mailboxes.models import CleanupState, Mailbox


class Command(BaseCommand):
    help = "List cleanups that became dead letters; with --requeue, queue them again with a fresh attempt count."

    def add_arguments(self, parser):
        parser.add_argument("--requeue", action="store_true")
        parser.add_argument("--limit", type=int, default=1000)

    def handle(self, *args, requeue: bool, limit: int, **options):
        dead = Mailbox.objects.filter(cleanup_state=CleanupState.DEAD).order_by("expired_at", "deleted_at")
        rows = list(dead.values_list("id", "address", "status", "cleanup_attempts", "cleanup_last_error")[:limit])
        for mailbox_id, address, status, attempts, error in rows:
            self.stdout.write(f"{mailbox_id}  {address}  {status}  attempts={attempts}  {error[:200]}")
        if requeue:
            requeued = cleanup_requeue(mailbox_ids=[row[0] for row in rows])
            self.stdout.write(f"requeued {len(requeued)} dead letter(s)")
        else:
            self.stdout.write(f"{len(rows)} dead letter(s)")
