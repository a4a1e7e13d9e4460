"""Relay's inbound SMTP server (aiosmtpd), `manage.py runsmtp`: delivers only to its own
mailboxes, through relay.ingest. Several `--reuse-port` processes may share a port."""
import asyncio
import functools
import logging
import os
import signal
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from email._header_value_parser import get_addr_spec, get_angle_addr
from email.errors import HeaderParseError

from aiosmtpd.smtp import SMTP, Envelope, Session
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import close_old_connections, connections

from accounts.inputs import whole_number_or_none
from core import dns
from mailboxes.messages import MailboxFull, recipient_by_address
from relay.verdicts import TEMPERROR, authenticate, nothing_known
from core.client_address import client_group
from relay.ingest import message_ingest
from relay.outbox.delivery import bounce_receive, is_bounce_address

logger = logging.getLogger(__name__)

# Look-ups and storing have pools of their own: a slow message never holds RCPT's threads.
LOOKUP_THREADS = 8
STORAGE_THREADS = 4
# Verdicts wait on DNS: each client group runs a few at once, and the pool has a thread
# for every connection allowed, so a slow sender waits for its own slots only.
VERDICTS_PER_CLIENT = 4


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
        """Close each thread's database connection (Django keeps one per thread), then the pool."""
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
        if name.upper() == "SIZE" and (size := whole_number_or_none(value)) is not None:
            return size
    return 0


class RelayHandler:
    def __init__(self) -> None:
        # DATA commands in progress: a shutdown waits for them, so a 250 is always stored.
        self.deliveries_in_flight = 0
        self.idle = asyncio.Event()
        self.idle.set()
        self.lookups = DatabasePool("lookup", LOOKUP_THREADS)
        self.storage = DatabasePool("store", STORAGE_THREADS)
        self.verdicts = ThreadPoolExecutor(max_workers=settings.RELAY_SMTP_MAX_CONNECTIONS,
                                           thread_name_prefix="smtp-verdict")
        # Per client group: its verdict slots, and how many verdicts hold or wait for one.
        self.verdict_slots: dict[str, asyncio.Semaphore] = {}
        self.verdict_users: dict[str, int] = {}

    async def authenticate(self, session: Session, envelope: Envelope, raw: bytes, group: str) -> dict:
        """The message's verdict, worked out in the verdict pool within one DNS budget that
        counts the wait for its client group's slots (past it: temperror)."""
        # The look-ups end a little before the reply must go, so their temperrors arrive.
        if not settings.RELAY_SMTP_VERDICTS:
            return nothing_known()
        seconds = settings.RELAY_DNS_TIMEOUT_SECONDS
        deadline = time.monotonic() + seconds
        slot = self.verdict_slots.setdefault(group, asyncio.Semaphore(VERDICTS_PER_CLIENT))
        self.verdict_users[group] = self.verdict_users.get(group, 0) + 1
        try:
            await asyncio.wait_for(slot.acquire(), timeout=max(0.0, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            self._verdict_user_gone(group)
            logger.warning("no verdict slot for a message from %s (client %s) within %ss: temperror",
                           envelope.mail_from, group, seconds)
            return nothing_known(TEMPERROR)
        lookups = dns.Budget(max(0.0, deadline - time.monotonic() - min(0.25, seconds / 4)))
        job = asyncio.get_running_loop().run_in_executor(self.verdicts, functools.partial(
            authenticate, raw, ip=(session.peer or ("",))[0] or None, mail_from=envelope.mail_from or "",
            helo=session.host_name or "", budget=lookups))
        job.add_done_callback(lambda _: (slot.release(), self._verdict_user_gone(group)))
        try:
            return await asyncio.wait_for(asyncio.shield(job), timeout=max(0.0, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            logger.info("no verdict for a message from %s within %ss: temperror", envelope.mail_from, seconds)
        except Exception:
            logger.exception("could not work out the verdict of a message from %s", envelope.mail_from)
        return nothing_known(TEMPERROR)

    def _verdict_user_gone(self, group: str) -> None:
        self.verdict_users[group] -= 1
        if not self.verdict_users[group]:
            del self.verdict_users[group], self.verdict_slots[group]

    async def handle_RCPT(self, server: SMTP, session: Session, envelope: Envelope, address: str, rcpt_options):
        accepted = getattr(envelope, "relay_recipients", None)
        if accepted is None:
            accepted = envelope.relay_recipients = {}
        if len(envelope.rcpt_tos) >= settings.RELAY_SMTP_MAX_RECIPIENTS:
            return "452 4.5.3 Too many recipients"
        if is_bounce_address(address):
            # A bounce or complaint for mail Relay sent: taken whatever its tag, read at DATA.
            envelope.relay_bounces = [*getattr(envelope, "relay_bounces", []), address]
            envelope.rcpt_tos.append(address)
            return "250 2.1.5 OK"
        try:
            recipient = await self.lookups.run(recipient_by_address, address=address)
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
        bounces = getattr(envelope, "relay_bounces", [])
        if not recipients and not bounces:
            return "554 5.5.1 No valid recipients"
        server.storing = True
        raw = envelope.original_content or envelope.content or b""
        if bounces:
            try:
                await self.storage.run(bounce_receive, raw=raw, addresses=bounces)
            except Exception:
                logger.exception("could not read a bounce from %s", envelope.mail_from)
                server.storing = False
                return "451 4.3.0 Could not take the message, try again later"
            if not recipients:
                server.storing = False
                return "250 2.0.0 OK"
        try:
            authentication = await self.authenticate(session, envelope, raw, server.peer_host)
            await self.storage.run(
                message_ingest,
                raw=raw,
                mail_from=envelope.mail_from or "",
                recipients=recipients,
                authentication=authentication,
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


@functools.lru_cache(maxsize=4096)
def _address_in(arg: str) -> tuple[str | None, str | None]:
    """The address of a MAIL FROM or RCPT TO argument and what follows it, parsed as
    aiosmtpd parses it; (None, None) when it does not parse."""
    if not arg:
        return "", ""
    try:
        address, rest = get_angle_addr(arg) if arg.lstrip().startswith("<") else get_addr_spec(arg)
    except HeaderParseError:
        return None, None
    return address.addr_spec, rest


class RelaySMTP(SMTP):
    """aiosmtpd's SMTP with Relay's limits: enhanced codes on oversize mail, a ceiling on a
    connection's life, connection caps, and an idle timer that skips Relay's storing time."""

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

    def _getaddr(self, arg: str):
        # aiosmtpd's own builds a typing.Protocol class on every call; same parse, memoized.
        address, rest = _address_in(arg)
        if address and self.local_part_limit and len(address.rpartition("@")[0]) > self.local_part_limit:
            return None, None
        return address, rest

    async def push(self, status) -> None:
        # aiosmtpd says "552 Error: ..." for an oversize message (at SIZE= or in DATA).
        text = status.decode() if isinstance(status, bytes) else status
        if text.startswith("552 Error"):
            status = "552 5.3.4 Message size exceeds fixed maximum message size"
        await super().push(status)


def tls_context() -> ssl.SSLContext | None:
    """The TLS context when RELAY_SMTP_TLS_CERT and _KEY are set (STARTTLS offered then);
    a pair that does not load stops the server at start."""
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
    """Serve until `stop` is set, then stop accepting, let each delivery in progress finish
    (a 250 is already committed), and close."""
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
    handler.verdicts.shutdown(wait=False, cancel_futures=True)
    logger.info("SMTP server stopped")


def run_forever(host: str, port: int, *, reuse_port: bool = False) -> None:
    """`manage.py runsmtp`: serve until SIGTERM or SIGINT (`reuse_port`: SO_REUSEPORT)."""
    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await serve(host, port, stop=stop, reuse_port=reuse_port)

    asyncio.run(main())
