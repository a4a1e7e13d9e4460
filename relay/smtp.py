"""Relay's inbound SMTP server (aiosmtpd). It only ever delivers to its own mailboxes.

`recipient_mailbox` and `deliver_message` are plain functions, called from the
async handler through database thread pools, so tests can call them without a socket.
"""
import asyncio
import logging
import os
import signal
import socket
import ssl
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from aiosmtpd.smtp import SMTP, Envelope, Session
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import close_old_connections, connection, connections, transaction
from django.utils import timezone

from accounts.models import Account, AccountStatus
from mailboxes import wakeups
from mailboxes.ending import mailboxes_expire_due
from mailboxes.models import Mailbox, MailboxStatus, Message, MessageContent, Plan
from mailboxes.quotas import stored_bytes_limit
from mailboxes.signals import event_happened
from mailboxes.text import text_of_html
from relay.clients import client_group
from relay.extraction import find_codes, find_links
from relay.parsing import parse_message
from relay.tasks import index_owed_words

logger = logging.getLogger(__name__)

# --- the plain functions ----------------------------------------------------------------
@dataclass(frozen=True)
class Recipient:
    mailbox_id: uuid.UUID
    address: str
    stored_bytes: int
    quota_bytes: int

    def fits(self, size: int) -> bool:
        return self.stored_bytes + size <= self.quota_bytes


class MailboxFull(Exception):
    """No accepted mailbox has room for the message (the plan's storage quota)."""


def recipient_mailbox(address: str) -> Recipient | None:
    """The mailbox that may receive mail at `address` right now, or None.

    The mailbox's own `expires_at` is checked here, with the same lazy expiry the API
    uses: a mailbox past its time is expired on the spot and refused, even if no worker
    has run yet. A suspended account's mailboxes refuse mail while it is suspended
    (docs/api.md). One statement, written out rather than built by the ORM on every RCPT: building
    it was a fifth of runsmtp's Python time (bench/smtp_ingest.py)."""
    address = address.strip().lower()
    local_part, at, domain = address.rpartition("@")
    if not at or not local_part or domain not in settings.RELAY_DOMAINS or len(address) > 320:
        return None
    now = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(_RECIPIENT_SQL, [connection.ops.adapt_datetimefield_value(now), address, MailboxStatus.ACTIVE])
        row = cursor.fetchone()
    if row is None:
        return None
    mailbox_id, stored_bytes, due, plan, owner_status = row
    mailbox_id = Mailbox._meta.pk.to_python(mailbox_id)
    if owner_status == AccountStatus.SUSPENDED:
        return None
    if due:
        mailboxes_expire_due(mailbox_ids=[mailbox_id], now=now)
        return None
    return Recipient(mailbox_id, address, stored_bytes, stored_bytes_limit(plan or Plan.FREE))


_RECIPIENT_SQL = (
    f"SELECT m.id, m.stored_bytes, m.expires_at <= %s, a.plan, a.status FROM {Mailbox._meta.db_table} m"
    f" LEFT JOIN {Account._meta.db_table} a ON a.id = m.owner_id WHERE m.address = %s AND m.status = %s"
)


def deliver_message(*, raw: bytes, mail_from: str, recipients: list[Recipient]) -> list[int]:
    """Store one received message for each accepted mailbox that still takes it.

    The bytes and the parsed bodies are stored once (MessageContent), shared by one
    Message row per recipient. Mailboxes that ended between RCPT and DATA (deleted or
    purged) are skipped, and so are those the message would take over their storage
    quota; if that leaves none, MailboxFull. On PostgreSQL the transaction has a
    deadline (RELAY_SMTP_STORE_SECONDS): storage that cannot finish in time is rolled
    back whole, and the client is told to try again, so nothing is stored twice."""
    parsed = parse_message(raw)
    codes = find_codes(parsed.subject, parsed.text or text_of_html(parsed.html))
    links = find_links(parsed.text, parsed.html)
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL statement_timeout = %s", [settings.RELAY_SMTP_STORE_SECONDS * 1000])
        live = _count_one_more_message(recipients, len(raw))
        if not live:
            if any(not r.fits(len(raw)) for r in recipients):
                raise MailboxFull()
            return []
        content = MessageContent(raw=raw, text=parsed.text, html=parsed.html, headers=parsed.headers,
                                 attachments=parsed.attachments, codes=codes, links=links,
                                 parsed_fully=parsed.parsed_fully)  # its words are owed: see words_owed
        _insert([content])
        messages = [
            Message(
                mailbox_id=recipient.mailbox_id,
                content=content,
                envelope_from=mail_from[:320],
                envelope_to=recipient.address[:320],
                from_header=parsed.from_header,
                to_header=parsed.to_header,
                subject=parsed.subject,
                size=len(raw),
                has_attachments=bool(parsed.attachments),
            )
            for recipient in recipients if recipient.mailbox_id in live
        ]
        _insert(messages)
        event_happened.send(sender=Message, event="message.received", messages=messages)
        wakeups.publish_after_commit(live, "message")
        transaction.on_commit(words_owed)
    logger.info("stored a %d-byte message from %s for %d mailbox(es)", len(raw), mail_from or "<>", len(messages))
    return [message.id for message in messages]


def _insert(rows: list) -> None:
    """INSERT `rows` (instances of one model, without ids) in one statement and set their
    ids, as bulk_create does, but without building the query anew for every message: the
    ORM's query building was a third of deliver_message's Python time. Each value goes
    through its field's pre_save (auto_now_add) and preparation (JSON, bytes, times,
    UUIDs), as the ORM sends it."""
    meta = rows[0]._meta
    fields = [field for field in meta.concrete_fields if not field.primary_key]
    quote = connection.ops.quote_name
    one = f"({', '.join(['%s'] * len(fields))})"
    params = [field.get_db_prep_save(field.pre_save(row, True), connection) for row in rows for field in fields]
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {quote(meta.db_table)} ({', '.join(quote(field.column) for field in fields)})"
            f" VALUES {', '.join([one] * len(rows))} RETURNING {quote(meta.pk.column)}",
            params,
        )
        ids = sorted(row[0] for row in cursor.fetchall())
    # Identity ids are handed out in the order of the VALUES: sorted, they match the rows.
    for row, row_id in zip(rows, ids):
        row.id = row_id


# A worker is asked to write owed words at most this often per process, and that long
# after the first message that owes them: one task for every message a second brings.
WORDS_DELAY_SECONDS = 1.0
_words_lock = threading.Lock()
_words_next_publish = 0.0


def words_owed() -> None:
    """Ask a worker to write the words of the messages just stored (search's index; see
    mailboxes.services.contents_index_words), at most once per WORDS_DELAY_SECONDS in
    this process. The task runs WORDS_DELAY_SECONDS after it is asked for, so it finds
    every message committed before the next ask. Words that a lost or unpublished task
    leaves owed are written by the next one, by beat's backstop, or by the first search
    that needs them: nothing a client sees waits on this."""
    global _words_next_publish
    if connection.vendor != "postgresql":
        return
    with _words_lock:
        now = time.monotonic()
        if now < _words_next_publish:
            return
        _words_next_publish = now + WORDS_DELAY_SECONDS
    # Published from a thread of its own: the message's 250 never waits on the broker.
    threading.Thread(target=_ask_for_words, name="smtp-words", daemon=True).start()


def _ask_for_words() -> None:
    try:
        index_owed_words.apply_async(countdown=WORDS_DELAY_SECONDS)
    except Exception:
        logger.warning("could not queue the writing of owed search words; beat's backstop will", exc_info=True)


def _count_one_more_message(recipients: list[Recipient], size: int) -> set:
    """Add the message to message_count and stored_bytes of those mailboxes still there
    (not deleted, not purged) with room for it under their quota, and return their ids:
    the liveness check, the quota check and the counters in one statement per quota, on
    the ingest hot path (bench/smtp_ingest.py)."""
    id_field = Mailbox._meta.pk
    live = set()
    by_quota: dict[int, list] = {}
    for recipient in recipients:
        by_quota.setdefault(recipient.quota_bytes, []).append(recipient.mailbox_id)
    with connection.cursor() as cursor:
        for quota_bytes, mailbox_ids in by_quota.items():
            placeholders = ", ".join(["%s"] * len(mailbox_ids))
            cursor.execute(
                f"UPDATE {Mailbox._meta.db_table} SET message_count = message_count + 1,"
                f" stored_bytes = stored_bytes + %s"
                f" WHERE id IN ({placeholders}) AND status <> %s AND stored_bytes + %s <= %s RETURNING id",
                [size] + [id_field.get_db_prep_value(mailbox_id, connection) for mailbox_id in mailbox_ids]
                + [MailboxStatus.DELETED, size, quota_bytes],
            )
            live |= {id_field.to_python(row[0]) for row in cursor.fetchall()}
    return live


# --- the server ---------------------------------------------------------------------------
# RCPT lookups and DATA storage run in pools of their own: a slow message (parsing,
# storing) can hold the storage threads, never the threads that answer other sessions'
# RCPT commands.
LOOKUP_THREADS = 8
STORAGE_THREADS = 4


class DatabasePool:
    """A thread pool whose threads each keep a Django database connection."""

    def __init__(self, name: str, size: int) -> None:
        self.size = size
        self.executor = ThreadPoolExecutor(max_workers=size, thread_name_prefix=f"smtp-{name}")

    async def run(self, function, **kwargs):
        """Run a database function in the pool, as Django runs a request: a connection
        that broke or outlived CONN_MAX_AGE is replaced first."""

        def call():
            close_old_connections()
            return function(**kwargs)

        return await asyncio.get_running_loop().run_in_executor(self.executor, call)

    async def close(self) -> None:
        """Close the connection each thread holds, then the pool. Django keeps
        connections per thread, so each thread must close its own: one task per thread,
        held at a barrier so no thread can take two."""
        barrier = threading.Barrier(self.size)

        def close() -> None:
            connections.close_all()
            barrier.wait(timeout=10)

        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(self.executor, close) for _ in range(self.size)),
                             return_exceptions=True)
        self.executor.shutdown(wait=True)


def _declared_size(envelope: Envelope) -> int:
    for option in envelope.mail_options or []:
        name, _, value = option.partition("=")
        if name.upper() == "SIZE" and value.isdigit():
            return int(value)
    return 0


class RelayHandler:
    def __init__(self) -> None:
        # DATA commands between their first byte and their reply, counted so a shutdown
        # can wait for them: a message answered 250 must be stored, and one being stored
        # must get its 250 out before the connection closes.
        self.deliveries_in_flight = 0
        self.idle = asyncio.Event()
        self.idle.set()
        self.lookups = DatabasePool("lookup", LOOKUP_THREADS)
        self.storage = DatabasePool("store", STORAGE_THREADS)

    async def handle_RCPT(self, server: SMTP, session: Session, envelope: Envelope, address: str, rcpt_options):
        accepted = getattr(envelope, "relay_recipients", None)
        if accepted is None:
            accepted = envelope.relay_recipients = {}
        if len(envelope.rcpt_tos) >= settings.RELAY_SMTP_MAX_RECIPIENTS:
            return "452 4.5.3 Too many recipients"
        try:
            recipient = await self.lookups.run(recipient_mailbox, address=address)
        except Exception:
            logger.exception("RCPT lookup failed for %s", address)
            return "451 4.3.0 Temporary lookup failure, try again later"
        if recipient is None:
            logger.info("refused RCPT %s from %s", address, session.peer)
            return "550 5.1.1 No such mailbox here"
        if not recipient.fits(max(_declared_size(envelope), 1)):
            logger.info("refused RCPT %s: mailbox full", address)
            return "552 5.2.2 Mailbox full"
        accepted.setdefault(recipient.mailbox_id, recipient)
        envelope.rcpt_tos.append(address)
        return "250 2.1.5 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope):
        recipients = list((getattr(envelope, "relay_recipients", None) or {}).values())
        if not recipients:
            return "554 5.5.1 No valid recipients"
        server.storing = True
        try:
            await self.storage.run(
                deliver_message,
                raw=envelope.original_content or envelope.content or b"",
                mail_from=envelope.mail_from or "",
                recipients=recipients,
            )
        except MailboxFull:
            return "552 5.2.2 Mailbox full"
        except Exception:
            logger.exception("could not store a message from %s", envelope.mail_from)
            return "451 4.3.0 Could not store the message, try again later"
        finally:
            server.storing = False
        # Only now, with the message committed, does the client hear 250.
        return "250 2.0.0 OK: queued"


class RelaySMTP(SMTP):
    """aiosmtpd's SMTP with Relay's limits: enhanced status codes on oversize mail, a
    ceiling on how long one connection may last whatever it does, caps on connections
    (in all and per client address), and an idle timer that does not count the time
    Relay itself spends storing a message."""

    sessions: set = set()

    def connection_made(self, transport) -> None:
        if getattr(self, "_session_timer", None) is not None:
            # Called again by the TLS layer after STARTTLS: the same connection, counted once.
            super().connection_made(transport)
            return
        super().connection_made(transport)
        self.storing = False
        peer = (transport.get_extra_info("peername") or ("?",))[0]
        self.peer_host = client_group(peer)
        same_peer = sum(1 for session in RelaySMTP.sessions if session.peer_host == self.peer_host)
        RelaySMTP.sessions.add(self)
        self._session_timer = self.loop.call_later(settings.RELAY_SMTP_SESSION_SECONDS, self._session_too_long)
        if (len(RelaySMTP.sessions) > settings.RELAY_SMTP_MAX_CONNECTIONS
                or same_peer >= settings.RELAY_SMTP_MAX_CONNECTIONS_PER_CLIENT):
            logger.warning("refused a connection from %s: too many connections", peer)
            transport.write(b"421 4.7.0 Too many connections, try again later\r\n")
            transport.close()

    def _timeout_cb(self) -> None:
        # Storage time is not idle time: a client waiting for the reply to its DATA is
        # not idle, and cutting it off would make it send the message again.
        if self.storing:
            self._reset_timeout()
            return
        super()._timeout_cb()

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
        if text.startswith("552 Error"):
            status = "552 5.3.4 Message size exceeds fixed maximum message size"
        await super().push(status)


def tls_context() -> ssl.SSLContext | None:
    """The server's TLS context when RELAY_SMTP_TLS_CERT and RELAY_SMTP_TLS_KEY are set:
    STARTTLS is offered then, and only then. A pair that does not load stops the server
    at start, naming the settings."""
    if not settings.RELAY_SMTP_TLS_CERT:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(settings.RELAY_SMTP_TLS_CERT, settings.RELAY_SMTP_TLS_KEY)
    except (ssl.SSLError, OSError) as exc:
        raise ImproperlyConfigured(f"RELAY_SMTP_TLS_CERT and RELAY_SMTP_TLS_KEY do not load as a certificate "
                                   f"chain and its key: {exc}") from None
    return context


def make_smtp(handler: RelayHandler, context: ssl.SSLContext | None = None) -> RelaySMTP:
    return RelaySMTP(
        handler,
        tls_context=context,
        data_size_limit=settings.RELAY_MAX_MESSAGE_BYTES,
        enable_SMTPUTF8=True,
        hostname=settings.RELAY_DOMAINS[0],
        ident="Relay",
        timeout=settings.RELAY_SMTP_IDLE_SECONDS,
        command_call_limit=1000,
    )


async def serve(host: str, port: int, *, stop: asyncio.Event, ready=None, drain_seconds: float = 30,
                reuse_port: bool = False) -> None:
    """Serve until `stop` is set, then stop accepting, let every delivery in progress
    finish (a message whose DATA was answered 250 is already committed), and close.
    With `reuse_port`, other processes listen on the same port (SO_REUSEPORT) and the
    kernel spreads the connections among them."""
    loop = asyncio.get_running_loop()
    handler = RelayHandler()
    context = tls_context()
    server = await loop.create_server(lambda: make_smtp(handler, context), host=host, port=port,
                                      reuse_port=reuse_port or None)
    bound = server.sockets[0].getsockname()
    logger.info("SMTP listening on %s:%s (process %d)%s", bound[0], bound[1], os.getpid(),
                ", offering STARTTLS" if context else "")
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
    await handler.lookups.close()
    await handler.storage.close()
    logger.info("SMTP server stopped")


def run_forever(host: str, port: int, *, processes: int = 1) -> None:
    """`manage.py runsmtp`: serve until SIGTERM or SIGINT, in `processes` processes on
    one port. Parsing and storing a message is Python holding the GIL, so one process
    uses one core however many connections it has."""
    if processes <= 1:
        _serve_until_signalled(host, port, reuse_port=False)
    else:
        _supervise(host, port, processes)


def _serve_until_signalled(host: str, port: int, *, reuse_port: bool) -> None:
    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await serve(host, port, stop=stop, reuse_port=reuse_port)

    asyncio.run(main())


# A server process that dies this soon after its start is started again after a pause,
# and after this many such deaths in a row the whole server stops: the cause (a port
# taken, a setting wrong) would only repeat.
_QUICK_DEATH_SECONDS = 5
_QUICK_DEATHS_MAX = 5


def _supervise(host: str, port: int, processes: int) -> None:
    """Fork `processes` servers that share the port (SO_REUSEPORT) and wait on them.
    One that dies is started again; SIGTERM or SIGINT is passed on to every one, and
    this returns once they have all drained and exited. Forked before any database
    connection is opened, so none is shared."""
    # SO_REUSEPORT would let a second Relay (or anything of the same user) share the port
    # in silence: a bind without it first, which fails if anyone listens there already.
    # (SO_REUSEADDR, as every server sets it, so that connections of a previous run
    # still in TIME_WAIT do not count.)
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))
    children: dict[int, float] = {}
    stopping = False

    def start() -> None:
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                for signum in (signal.SIGTERM, signal.SIGINT):
                    signal.signal(signum, signal.SIG_DFL)
                _serve_until_signalled(host, port, reuse_port=True)
            except BaseException:
                logger.exception("SMTP process %d failed", os.getpid())
                code = 1
            finally:
                logging.shutdown()
                os._exit(code)
        children[pid] = time.monotonic()

    def pass_on(signum, frame) -> None:
        nonlocal stopping
        stopping = True
        for pid in list(children):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, pass_on)
    signal.signal(signal.SIGINT, pass_on)
    for _ in range(processes):
        start()
    logger.info("SMTP on %s:%s in %d processes", host, port, processes)
    quick_deaths = 0
    while children:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        started = children.pop(pid, None)
        if stopping or started is None:
            continue
        quick = time.monotonic() - started < _QUICK_DEATH_SECONDS
        quick_deaths = quick_deaths + 1 if quick else 0
        if quick_deaths >= _QUICK_DEATHS_MAX:
            logger.error("SMTP processes keep exiting at start (the last with status %d); stopping", status)
            pass_on(signal.SIGTERM, None)
            continue
        logger.error("SMTP process %d exited (status %d); starting another", pid, status)
        if quick:
            time.sleep(1)
        start()
    logger.info("SMTP stopped")
