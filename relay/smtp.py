"""Relay's inbound SMTP server (aiosmtpd). It only ever delivers to its own mailboxes.

`recipient_mailbox_id` and `deliver_message` are plain functions, called from the
async handler through sync_to_async, so tests can call them without a socket.
"""
import asyncio
from concurrent.futures import ThreadPoolExecutor
import logging
import signal
import threading

from aiosmtpd.smtp import SMTP, Envelope, Session
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections, connection, connections, transaction

from mailboxes.ending import mailbox_lazy_expire
from mailboxes.models import Mailbox, MailboxStatus, Message
from relay.parsing import parse_message

logger = logging.getLogger(__name__)


# --- the plain functions ----------------------------------------------------------------
def recipient_mailbox_id(address: str):
    """The id of the mailbox that may receive mail at `address` right now, or None.

    The mailbox's own `expires_at` is checked here, with the same lazy-expiry service the
    API uses: a mailbox past its time is refused even if no worker has run yet."""
    address = address.strip().lower()
    local_part, at, domain = address.rpartition("@")
    if not at or not local_part or domain not in settings.RELAY_DOMAINS or len(address) > 320:
        return None
    mailbox = Mailbox.objects.filter(address=address, status=MailboxStatus.ACTIVE).only(
        "id", "status", "expires_at", "address").first()
    if mailbox is None:
        return None
    mailbox = mailbox_lazy_expire(mailbox=mailbox)
    return mailbox.id if mailbox.status == MailboxStatus.ACTIVE else None


def deliver_message(*, raw: bytes, mail_from: str, recipients: dict) -> list[int]:
    """Store one received message in each accepted mailbox ({mailbox_id: address}).

    Mailboxes that ended between RCPT and DATA (deleted or purged) are skipped; the
    message is stored for every other one, in one transaction."""
    parsed = parse_message(raw)
    with transaction.atomic():
        live = _count_one_more_message(list(recipients))
        messages = Message.objects.bulk_create([
            Message(
                mailbox_id=mailbox_id,
                envelope_from=mail_from[:320],
                envelope_to=address[:320],
                from_header=parsed.from_header,
                to_header=parsed.to_header,
                subject=parsed.subject,
                text=parsed.text,
                html=parsed.html,
                headers=parsed.headers,
                attachments=parsed.attachments,
                size=len(raw),
                raw=raw,
            )
            for mailbox_id, address in recipients.items() if mailbox_id in live
        ])
    logger.info("stored a %d-byte message from %s for %d mailbox(es)", len(raw), mail_from or "<>", len(messages))
    return [message.id for message in messages]


def _count_one_more_message(mailbox_ids: list) -> set:
    """Add one to message_count of those mailboxes still there (not deleted, not purged)
    and return their ids: the liveness check and the counter in one statement, on the
    ingest hot path (bench/smtp_ingest.py)."""
    id_field = Mailbox._meta.pk
    placeholders = ", ".join(["%s"] * len(mailbox_ids))
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Mailbox._meta.db_table} SET message_count = message_count + 1"
            f" WHERE id IN ({placeholders}) AND status <> %s RETURNING id",
            [id_field.get_db_prep_value(mailbox_id, connection) for mailbox_id in mailbox_ids] + [MailboxStatus.DELETED],
        )
        return {id_field.to_python(row[0]) for row in cursor.fetchall()}


# --- the server ---------------------------------------------------------------------------
async def _in_db_thread(function, **kwargs):
    """Run a database function in the pool, as Django runs a request: a connection that
    broke or outlived CONN_MAX_AGE is replaced first."""

    def call():
        close_old_connections()
        return function(**kwargs)

    return await sync_to_async(call, thread_sensitive=False)()


class RelayHandler:
    def __init__(self) -> None:
        # DATA commands between their first byte and their reply, counted so a shutdown
        # can wait for them: a message answered 250 must be stored, and one being stored
        # must get its 250 out before the connection closes.
        self.deliveries_in_flight = 0
        self.idle = asyncio.Event()
        self.idle.set()

    async def handle_RCPT(self, server: SMTP, session: Session, envelope: Envelope, address: str, rcpt_options):
        accepted = getattr(envelope, "relay_recipients", None)
        if accepted is None:
            accepted = envelope.relay_recipients = {}
        if len(envelope.rcpt_tos) >= settings.RELAY_SMTP_MAX_RECIPIENTS:
            return "452 4.5.3 Too many recipients"
        try:
            mailbox_id = await _in_db_thread(recipient_mailbox_id, address=address)
        except Exception:
            logger.exception("RCPT lookup failed for %s", address)
            return "451 4.3.0 Temporary lookup failure, try again later"
        if mailbox_id is None:
            logger.info("refused RCPT %s from %s", address, session.peer)
            return "550 5.1.1 No such mailbox here"
        accepted.setdefault(mailbox_id, address.lower())
        envelope.rcpt_tos.append(address)
        return "250 2.1.5 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope):
        recipients = getattr(envelope, "relay_recipients", None) or {}
        if not recipients:
            return "554 5.5.1 No valid recipients"
        try:
            await _in_db_thread(
                deliver_message,
                raw=envelope.original_content or envelope.content or b"",
                mail_from=envelope.mail_from or "",
                recipients=recipients,
            )
        except Exception:
            logger.exception("could not store a message from %s", envelope.mail_from)
            return "451 4.3.0 Could not store the message, try again later"
        # Only now, with the message committed, does the client hear 250.
        return "250 2.0.0 OK: queued"


class RelaySMTP(SMTP):
    """aiosmtpd's SMTP with Relay's limits: enhanced status codes on oversize mail, and a
    ceiling on how long one connection may last whatever it does."""

    sessions: set = set()

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        RelaySMTP.sessions.add(self)
        self._session_timer = self.loop.call_later(settings.RELAY_SMTP_SESSION_SECONDS, self._session_too_long)

    def connection_lost(self, exc) -> None:
        self._session_timer.cancel()
        RelaySMTP.sessions.discard(self)
        super().connection_lost(exc)

    def _session_too_long(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"421 4.4.2 Session time limit reached, closing\r\n")
            self.transport.close()

    async def smtp_DATA(self, arg: str) -> None:
        handler = self.event_handler
        handler.deliveries_in_flight += 1
        handler.idle.clear()
        try:
            await super().smtp_DATA(arg)
        finally:
            handler.deliveries_in_flight -= 1
            if not handler.deliveries_in_flight:
                handler.idle.set()

    async def push(self, status) -> None:
        # aiosmtpd says "552 Error: ..." for an oversize message (at SIZE= or in DATA).
        text = status.decode() if isinstance(status, bytes) else status
        if text.startswith("552 "):
            status = "552 5.3.4 Message size exceeds fixed maximum message size"
        await super().push(status)


def make_smtp(handler: RelayHandler) -> RelaySMTP:
    return RelaySMTP(
        handler,
        data_size_limit=settings.RELAY_MAX_MESSAGE_BYTES,
        enable_SMTPUTF8=True,
        hostname=settings.RELAY_DOMAINS[0],
        timeout=settings.RELAY_SMTP_IDLE_SECONDS,
        command_call_limit=1000,
    )


async def serve(host: str, port: int, *, stop: asyncio.Event, ready=None, drain_seconds: float = 30) -> None:
    """Serve until `stop` is set, then stop accepting, let every delivery in progress
    finish (a message whose DATA was answered 250 is already committed), and close."""
    loop = asyncio.get_running_loop()
    # Database work runs in these threads (each keeps its own connection); shutting the
    # pool down at the end closes those connections with their threads.
    executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="smtp-db")
    loop.set_default_executor(executor)
    handler = RelayHandler()
    server = await loop.create_server(lambda: make_smtp(handler), host=host, port=port)
    bound = server.sockets[0].getsockname()
    logger.info("SMTP listening on %s:%s", bound[0], bound[1])
    if ready is not None:
        ready(bound)
    await stop.wait()
    server.close()
    try:
        await asyncio.wait_for(handler.idle.wait(), timeout=drain_seconds)
    except asyncio.TimeoutError:
        logger.warning("%d deliveries still running after %ss; stopping anyway", handler.deliveries_in_flight, drain_seconds)
    for session in list(RelaySMTP.sessions):
        if session.transport is not None:
            session.transport.write(b"421 4.3.2 Server shutting down\r\n")
            session.transport.close()
    await server.wait_closed()
    await _close_connections_in(executor, loop)
    executor.shutdown(wait=True)
    logger.info("SMTP server stopped")


async def _close_connections_in(executor: ThreadPoolExecutor, loop) -> None:
    """Close the database connection each pool thread holds. Django keeps connections
    per thread, so each thread must close its own: one task per thread, held at a
    barrier so no thread can take two."""
    size = executor._max_workers
    barrier = threading.Barrier(size)

    def close() -> None:
        connections.close_all()
        barrier.wait(timeout=10)

    await asyncio.gather(*(loop.run_in_executor(executor, close) for _ in range(size)), return_exceptions=True)


def run_forever(host: str, port: int) -> None:
    """`manage.py runsmtp`: serve until SIGTERM or SIGINT."""

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await serve(host, port, stop=stop)

    asyncio.run(main())
