"""The one clock (docs/architecture.md, "One clock"): what two processes could disagree on
(due, leases, token expiry) is decided by the database's clock. Reading it is one of the
differences between PostgreSQL and SQLite, so it is written in the storage seam
(core/storage.py); the apps ask for it here by its name."""
from core.storage import clock_read, clock_sql, db_now

__all__ = ["clock_read", "clock_sql", "db_now"]
