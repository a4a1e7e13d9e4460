"""The outbox's collector (`manage.py runmailer`): LISTENs for queued rows (polls on SQLite),
claims batches by count or time with SKIP LOCKED, and hands each to a Celery task."""
import logging
import select
import signal
import time
from datetime import timedelta

from celery import current_app
from django.conf import settings
from django.db import DatabaseError, connection, connections

from owed import db_now
from relay import task_names
from relay.outbox.send import batch_claim

logger = logging.getLogger(__name__)
# Sent by name: relay/tasks.py imports this package (the batch's sending), so an import
# of the task would close a circle.
SEND_TASK = task_names.SEND_OUTBOX_BATCH

CHANNEL = "relay_outbox"
# The longest a wait lasts before the loop looks at its stop flag again.
MAX_WAIT_SECONDS = 1.0
# Most seconds between reconnection attempts after the database went away.
MAX_RECONNECT_WAIT_SECONDS = 5.0


class Mailer:
    def __init__(self, *, limit: int | None = None, timeout_ms: int | None = None) -> None:
        self.limit = limit or settings.RELAY_MAILER_BATCH_LIMIT
        self.timeout = (timeout_ms or settings.RELAY_MAILER_BATCH_TIMEOUT_MS) / 1000
        # Lapsed leases are looked for a few times per lease, and at least every 5 s.
        self.tick = min(5.0, max(0.5, settings.RELAY_MAILER_LEASE_SECONDS / 4))
        self.running = True
        self.listener = None

    def stop(self, *_) -> None:
        self.running = False

    # --- claiming and handing over ----------------------------------------------------
    def dispatch(self, *, reason: str, queued_before=None) -> int:
        """Claim one batch and hand it to a worker; returns its size."""
        claim, ids = batch_claim(limit=self.limit, queued_before=queued_before)
        if not ids:
            return 0
        logger.info("claimed a batch of %d mail(s) (%s)", len(ids), reason)
        try:
            current_app.send_task(SEND_TASK, args=(str(claim), ids))
        except Exception:
            # The rows stay claimed; when the lease lapses any mailer claims them again.
            logger.exception("could not queue a batch of %d mail(s); it is claimed again after its lease (%d s)",
                             len(ids), settings.RELAY_MAILER_LEASE_SECONDS)
        return len(ids)

    def drain(self, reason: str) -> None:
        while self.running and self.dispatch(reason=reason) == self.limit:
            pass

    def idle_tick(self) -> None:
        """Batches whose lease lapsed, and queued rows older than a batch timeout (their
        notification was missed, or came while this mailer was reconnecting)."""
        missed_before = db_now() - timedelta(seconds=self.timeout)
        while self.running and self.dispatch(reason="lapsed or missed", queued_before=missed_before) == self.limit:
            pass

    # --- the loops ----------------------------------------------------------------------
    def run(self) -> None:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        listening = connection.vendor == "postgresql"
        logger.info("mailer ready: %s (batch limit %d, timeout %d ms)",
                    f"listening on {CHANNEL}" if listening else "polling (no LISTEN on this database)",
                    self.limit, self.timeout * 1000)
        failures = 0
        while self.running:
            try:
                self.listen_loop() if listening else self.poll_loop()
            except DatabaseError as exc:
                failures += 1
                wait = min(MAX_RECONNECT_WAIT_SECONDS, 0.2 * 2 ** failures)
                logger.warning("lost the database connection (%s); reconnecting in %.1f s",
                               str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__, wait)
                self.disconnect()
                self.sleep(wait)
            else:
                failures = 0
        self.disconnect()
        logger.info("mailer stopped")

    def sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while self.running and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, MAX_WAIT_SECONDS))

    def disconnect(self) -> None:
        for conn in (self.listener, connection):
            if conn is None:
                continue
            try:
                conn.close()
            except DatabaseError:
                pass  # already gone
        self.listener = None

    def poll_loop(self) -> None:
        self.drain("backlog")
        while self.running:
            self.sleep(self.timeout)
            self.drain("poll")

    def listen_loop(self) -> None:
        # A connection of its own, in autocommit: notifications arrive between
        # transactions, and the claims go through Django's usual connection.
        self.listener = connections.create_connection("default")
        self.listener.ensure_connection()
        self.listener.set_autocommit(True)
        raw = self.listener.connection
        with self.listener.cursor() as cursor:
            cursor.execute(f"LISTEN {CHANNEL}")
        logger.info("connected; listening on %s", CHANNEL)
        self.drain("backlog")
        seen, first_at, last_tick = 0, 0.0, time.monotonic()
        while self.running:
            try:
                raw.poll()
            except Exception as exc:  # psycopg's own errors, before Django wraps them
                raise DatabaseError(str(exc)) from exc
            if raw.notifies:
                if not seen:
                    first_at = time.monotonic()
                seen += len(raw.notifies)
                raw.notifies.clear()
            now = time.monotonic()
            if seen >= self.limit:
                self.dispatch(reason="batch limit reached")
                # The notifications beyond this batch wait for the next one, timed anew.
                seen -= self.limit
                first_at = now
                continue
            if seen and now - first_at >= self.timeout:
                self.dispatch(reason="batch timeout")
                seen = 0
                continue
            if now - last_tick >= self.tick:
                last_tick = now
                with self.listener.cursor() as cursor:
                    cursor.execute("SELECT 1")  # a health check of the listening connection
                self.idle_tick()
                continue
            wait = (first_at + self.timeout - now) if seen else (last_tick + self.tick - now)
            select.select([raw], [], [], max(0.0, min(wait, MAX_WAIT_SECONDS)))
