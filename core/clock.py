"""The one clock (docs/architecture.md, "One clock"): what two processes could disagree on
(due, leases, token expiry) is decided by the database's clock."""
from datetime import datetime

from django.db import connection
from django.utils import timezone


def db_now() -> datetime:
    """PostgreSQL's clock_timestamp(); on SQLite, which is one file on one host, that
    host's clock."""
    if connection.vendor != "postgresql":
        return timezone.now()
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]
