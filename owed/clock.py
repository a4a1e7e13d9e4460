"""The one clock (docs/architecture.md, "One clock"): every decision about time that two
processes could disagree on (a mailbox's end, a lease, a token's expiry, a retry's
time) is made with the database's clock, so a host whose clock is minutes off neither
ends a mailbox early nor takes a cleanup another worker still holds. A process's own
clock only times its own calls (timeouts, backoff waits).

Below every app, beside the rule for owed work, so that any of them may ask it."""
from datetime import datetime

from django.db import connection
from django.utils import timezone


def db_now() -> datetime:
    """The database's clock now (PostgreSQL's clock_timestamp()); on SQLite, which is one
    file on one host, that host's clock."""
    if connection.vendor != "postgresql":
        return timezone.now()
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]
