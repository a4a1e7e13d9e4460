from django.core.management.base import BaseCommand

from core.storage import connection_named
from relay.outbox.send import Mailer


class Command(BaseCommand):
    help = ("Run the outbox collector: claim queued mails in batches (LISTEN/NOTIFY on PostgreSQL, "
            "polling on SQLite) and hand each batch to a Celery worker. Any number may run.")

    def add_arguments(self, parser):
        parser.add_argument("--batch-limit", type=int, default=None, help="default RELAY_MAILER_BATCH_LIMIT")
        parser.add_argument("--batch-timeout-ms", type=int, default=None, help="default RELAY_MAILER_BATCH_TIMEOUT_MS")

    def handle(self, *args, batch_limit: int | None, batch_timeout_ms: int | None, **options):
        for value, name in ((batch_limit, "--batch-limit"), (batch_timeout_ms, "--batch-timeout-ms")):
            if value is not None and value < 1:
                self.stderr.write(f"{name} must be at least 1")
                raise SystemExit(2)
        connection_named("relay-mailer")
        Mailer(limit=batch_limit, timeout_ms=batch_timeout_ms).run()
