"""Relay's inbound SMTP server (aiosmtpd), `manage.py runsmtp`: delivers only to its own
mailboxes, through relay.ingest. Several `--reuse-port` processes may share a port. The
same process serves the sandboxes' submission port (RELAY_SUBMISSION_PORT, docs/sandbox.md):
AUTH, any sender and recipients, the message caught in the sandbox and never delivered."""
import asyncio
import functools
import ipaddress
import logging
import os
import signal
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from email._header_value_parser import get_addr_spec, get_angle_addr
from email.errors import HeaderParseError

from aiosmtpd.smtp import MISSING, SMTP, AuthResult, Envelope, LoginPassword, Session, _DataState
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import close_old_connections, connections

from accounts.inputs import whole_number_or_none
from core import dns
from mailboxes.messages import MailboxFull, recipient_by_address
from relay.verdicts import TEMPERROR, authenticate, nothing_known
from core.client_address import client_group
from mailboxes.faults import FaultAnswer, fault_answer, fault_rules_of
from relay.inbound.submission import (LockoutUnknown, SandboxLogin, login_failed, logins_locked, sandbox_login,
                                      sandbox_transaction)
from relay.ingest import message_ingest
from relay.outbox.delivery import bounce_receive, is_bounce_address

logger = logging.getLogger(__name__)

# Look-ups and storing have pools of their own: a slow message never holds RCPT's threads.
LOOKUP_THREADS = 8
STORAGE_THREADS = 4
# Verdicts wait on DNS: each client group runs a few at once, and the pool has a thread
# for every connection allowed, so a slow sender waits for its own slots only.
VERDICTS_PER_CLIENT = 4
# DATA reads all its reader holds at once; more than it can ever hold.
READ_ALL = 1 << 24


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
            await self._data(arg)
        finally:
            handler.deliveries_in_flight -= 1
            if not handler.deliveries_in_flight:
                handler.idle.set()

    async def _data(self, arg: str) -> None:
        """aiosmtpd's DATA (the same checks, answers and hooks), the message read in the
        chunks it arrived in rather than line by line (_message_read)."""
        if await self.check_helo_needed() or await self.check_auth_needed("DATA"):
            return
        if not self.envelope.rcpt_tos:
            await self.push("503 Error: need RCPT command")
            return
        if arg:
            await self.push("501 Syntax: DATA")
            return
        await self.push("354 End data with <CR><LF>.<CR><LF>")
        received, state = await self._message_read()
        if state is not _DataState.NOMINAL:
            await self.push("500 Line too long (see RFC5321 4.5.3.1.6)" if state is _DataState.TOO_LONG
                            else "552 Error: Too much mail data")
            self._set_post_data_state()
            return
        # RFC 5321 4.5.2: a line's leading dot was doubled by the client.
        original_content = (received[1:] if received.startswith(b".") else received).replace(b"\r\n.", b"\r\n")
        content = original_content
        if self._decode_data:
            try:
                content = original_content.decode(*("utf-8", "surrogateescape") if self.enable_SMTPUTF8
                                                  else ("ascii", "strict"))
            except UnicodeDecodeError:
                await self.push("500 Error: strict ASCII mode")
                return
        self.envelope.content, self.envelope.original_content = content, original_content
        status = await self._call_handler_hook("DATA")
        self._set_post_data_state()
        await self.push("250 OK" if status is MISSING else status)

    async def _message_read(self) -> tuple[bytes, _DataState]:
        """The message up to its ending line (a lone dot), and whether it kept aiosmtpd's
        limits: the data size and the line length. Read as it arrived, a chunk at a time
        (a 10 KB message is a read or two, where aiosmtpd awaits each of its ~100 lines);
        what the client sent after the dot is handed back to the reader for the next
        command. Past the size limit the rest is read and dropped until the dot."""
        reader, limit = self._reader, self.data_size_limit
        received, searched = bytearray(), 0
        over: _DataState | None = None  # once past the size limit: the answer owed
        while True:
            try:
                # Everything the reader holds: its buffer never reaches READ_ALL (the
                # transport pauses past twice the line limit; one recv is at most 256 KiB).
                chunk = await reader.read(READ_ALL)
            except asyncio.CancelledError:
                logger.info("connection lost during DATA")
                self._writer.close()
                raise
            if not chunk:  # end of stream: aiosmtpd's eof_received cancels this task
                self._writer.close()
                raise asyncio.CancelledError()
            received += chunk
            if over is None and received.startswith(b".\r\n"):
                end = 0  # an empty message: its first line is the dot
            else:
                end = received.find(b"\r\n.\r\n", max(0, searched - 4))
                end = -1 if end < 0 else end + 2
            if end >= 0:
                if leftover := bytes(received[end + 3:]):
                    reader.feed_data(leftover)  # the reader is empty: read() took all it had
                del received[end:]
                return bytes(received), self._data_state(received) if over is None else over
            if over is None and limit and len(received) > limit:
                # Which limit a line broke first is judged on what came before; the rest is dropped.
                over = self._data_state(received[:limit + 1])
            if over is not None:
                del received[:-4]
            searched = len(received)

    def _data_state(self, received: bytes) -> _DataState:
        """aiosmtpd's verdict on the lines of `received`: TOO_LONG or TOO_MUCH for whichever
        limit a line broke first, else NOMINAL."""
        limit = self.data_size_limit
        longest = max(map(len, received.split(b"\r\n"))) + 2
        if longest <= self.line_length_limit and not (limit and len(received) > limit):
            return _DataState.NOMINAL
        total = 0
        for line in received.split(b"\r\n"):
            if len(line) + 2 > self.line_length_limit:
                return _DataState.TOO_LONG
            total += len(line) + 2
            if limit and total > limit:
                return _DataState.TOO_MUCH
        return _DataState.NOMINAL

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


# --- the submission port -----------------------------------------------------------------------
# The recipients one submission may name (docs/sandbox.md): the 101st is 452 4.5.3.
SUBMISSION_MAX_RECIPIENTS = 100
AUTH_INVALID = "535 5.7.8 Authentication credentials invalid"
AUTH_LOCKED = "454 4.7.0 Too many failed authentications from your address, try again later"
AUTH_UNAVAILABLE = "454 4.7.0 Temporary authentication failure, try again later"
ENDED = "554 5.7.1 This sandbox has ended or was deleted"


class SubmissionHandler:
    """The submission port's handler: an authenticated session may name any sender and up
    to SUBMISSION_MAX_RECIPIENTS recipients, and its message is stored once in its sandbox
    (with the envelope), through the same relay.ingest as port 25, never delivered."""

    def __init__(self, inbound: RelayHandler) -> None:
        # The inbound handler's pools: the two ports share the process's threads.
        self.lookups, self.storage = inbound.lookups, inbound.storage
        self.deliveries_in_flight = 0
        self.idle = asyncio.Event()
        self.idle.set()

    async def fault(self, envelope: Envelope, stage: str, address: str) -> str | None:
        """The reply a fault rule gives at `stage` (after its delay), or None."""
        rules = getattr(envelope, "fault_rules", None)
        if not rules:
            return None
        answer: FaultAnswer | None = await self.lookups.run(fault_answer, rules=rules, stage=stage, address=address)
        if answer is None:
            return None
        if answer.delay_seconds:
            await asyncio.sleep(answer.delay_seconds)  # the rule's own delay: the client asked for it
        return answer.reply

    async def handle_MAIL(self, server: SMTP, session: Session, envelope: Envelope, address: str, mail_options):
        login: SandboxLogin = session.auth_data
        try:
            envelope.sandbox, envelope.fault_rules = await self.lookups.run(sandbox_transaction, login=login)
        except Exception:
            logger.exception("could not look up sandbox %s", login.mailbox_id)
            return "451 4.3.0 Temporary lookup failure, try again later"
        if envelope.sandbox is None:
            return ENDED
        faulted = await self.fault(envelope, "mail", address)
        if faulted is not None:
            return faulted
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 2.1.0 OK"

    async def handle_RCPT(self, server: SMTP, session: Session, envelope: Envelope, address: str, rcpt_options):
        if len(envelope.rcpt_tos) >= SUBMISSION_MAX_RECIPIENTS:
            return "452 4.5.3 Too many recipients"
        faulted = await self.fault(envelope, "rcpt", address)
        if faulted is not None:
            return faulted
        envelope.rcpt_tos.append(address)
        return "250 2.1.5 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope):
        if not envelope.rcpt_tos:
            return "554 5.5.1 No valid recipients"
        # A faulted message is not stored.
        faulted = await self.fault(envelope, "data", envelope.mail_from or "")
        if faulted is not None:
            return faulted
        server.storing = True
        raw = envelope.original_content or envelope.content or b""
        sandbox = envelope.sandbox  # looked up at MAIL FROM
        try:
            if not sandbox.fits(len(raw)):
                return "452 4.2.2 Sandbox full"
            # The app's own mail: no verdict to work out, nothing to relay.
            stored = await self.storage.run(message_ingest, raw=raw, mail_from=envelope.mail_from or "",
                                            recipients=[sandbox], authentication=nothing_known(),
                                            rcpt_to=list(envelope.rcpt_tos))
            if not stored:  # deleted since MAIL FROM
                return ENDED
        except MailboxFull:
            return "452 4.2.2 Sandbox full"
        except Exception:
            logger.exception("could not store a submission to sandbox %s", sandbox.mailbox_id)
            return "451 4.3.0 Could not store the message, try again later"
        finally:
            server.storing = False
        # Only now, with the message committed, does the client hear 250.
        return "250 2.0.0 OK: caught"


def _loopback(peer: str) -> bool:
    try:
        return ipaddress.ip_address(peer.split("%")[0]).is_loopback
    except ValueError:
        return False


class SubmissionSMTP(RelaySMTP):
    """RelaySMTP with AUTH (RFC 4954) required: PLAIN and LOGIN, offered only over TLS or
    on a loopback connection; each login asked of accounts.identity off the event loop, and
    a client group that keeps failing locked out in every process."""

    def connection_made(self, transport) -> None:
        first = getattr(self, "_session_timer", None) is None
        super().connection_made(transport)
        if first:
            peer = (transport.get_extra_info("peername") or ("",))[0]
            # A password in the clear only where it never leaves the host.
            self._auth_require_tls = not _loopback(peer)

    async def smtp_AUTH(self, arg: str) -> None:
        if self.session is not None and self.session.host_name and self.session.extended_smtp \
                and not self.session.authenticated:
            try:
                locked = await self.event_handler.lookups.run(logins_locked, group=self.peer_host)
            except LockoutUnknown:
                logger.warning("could not read the AUTH failures of %s; refusing AUTH for now", self.peer_host)
                await self.push(AUTH_UNAVAILABLE)
                return
            if locked:
                await self.push(AUTH_LOCKED)
                return
        await super().smtp_AUTH(arg)

    def _authenticate(self, mechanism: str, auth_data) -> AuthResult:
        # aiosmtpd asks synchronously, on the event loop: hand the login on, unjudged, to
        # _judged, which asks the database in the lookup pool.
        return AuthResult(success=False, handled=False, auth_data=auth_data)

    async def auth_PLAIN(self, _, args) -> AuthResult:
        return await self._judged(await super().auth_PLAIN(_, args))

    async def auth_LOGIN(self, _, args) -> AuthResult:
        return await self._judged(await super().auth_LOGIN(_, args))

    async def _judged(self, result: AuthResult) -> AuthResult:
        if not isinstance(result.auth_data, LoginPassword):
            return result  # aborted or malformed: aiosmtpd has answered
        try:
            username = result.auth_data.login.decode()
            password = result.auth_data.password.decode()
        except UnicodeDecodeError:
            login = None
        else:
            try:
                login = await self.event_handler.lookups.run(sandbox_login, username=username, password=password)
            except Exception:
                logger.exception("could not look up an SMTP login")
                return AuthResult(success=False, handled=False, message=AUTH_UNAVAILABLE)
        if login is None:
            logger.info("refused an SMTP login from %s", self.peer_host)
            await self.event_handler.lookups.run(login_failed, group=self.peer_host)
            return AuthResult(success=False, handled=False, message=AUTH_INVALID)
        # A fault rule's answer to a right login is the sandbox owner's wish, not a failure.
        envelope = Envelope()
        envelope.fault_rules = await self.event_handler.lookups.run(fault_rules_of, mailbox_id=login.mailbox_id)
        faulted = await self.event_handler.fault(envelope, "auth", login.address)
        if faulted is not None:
            return AuthResult(success=False, handled=False, message=faulted)
        return AuthResult(success=True, auth_data=login)


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


def _session_options(context: ssl.SSLContext | None) -> dict:
    """What every port's SMTP session is made with: the size limit, the idle timeout, the name."""
    return dict(tls_context=context, data_size_limit=settings.RELAY_MAX_MESSAGE_BYTES, enable_SMTPUTF8=True,
                hostname=settings.RELAY_DOMAINS[0], ident="Relay", timeout=settings.RELAY_SMTP_IDLE_SECONDS,
                command_call_limit=1000)


def make_smtp(handler: RelayHandler, context: ssl.SSLContext | None = None) -> RelaySMTP:
    return RelaySMTP(handler, **_session_options(context))


def make_submission(handler: SubmissionHandler, context: ssl.SSLContext | None = None) -> SubmissionSMTP:
    return SubmissionSMTP(
        handler,
        **_session_options(context),
        auth_required=True,
        auth_require_tls=True,  # per connection: not on loopback (SubmissionSMTP.connection_made)
        authenticator=lambda *args: AuthResult(success=False),  # never asked: SubmissionSMTP._authenticate
    )


async def serve(host: str, port: int, *, stop: asyncio.Event, ready=None, drain_seconds: float = 30,
                reuse_port: bool = False, submission_port: int | None = None, submission_ready=None) -> None:
    """Serve until `stop` is set, then stop accepting, let each delivery in progress finish
    (a 250 is already committed), and close. With `submission_port`, the sandboxes'
    submission port too (`submission_ready` is told its address)."""
    loop = asyncio.get_running_loop()
    handler = RelayHandler()
    context = tls_context()
    server = await loop.create_server(lambda: make_smtp(handler, context), host=host, port=port,
                                      reuse_port=reuse_port or None)
    bound = server.sockets[0].getsockname()
    logger.info("SMTP listening on %s:%s (process %d)%s", bound[0], bound[1], os.getpid(),
                ", offering STARTTLS" if context else "")
    servers, handlers = [server], [handler]
    if submission_port is not None:
        submitting = SubmissionHandler(handler)
        submission = await loop.create_server(lambda: make_submission(submitting, context), host=host,
                                              port=submission_port, reuse_port=reuse_port or None)
        servers.append(submission)
        handlers.append(submitting)
        submission_bound = submission.sockets[0].getsockname()
        logger.info("SMTP submission listening on %s:%s%s", submission_bound[0], submission_bound[1],
                    ", offering STARTTLS" if context else "; without RELAY_SMTP_TLS_CERT, AUTH on loopback only")
        if submission_ready is not None:
            submission_ready(submission_bound)
    if ready is not None:
        ready(bound)
    await stop.wait()
    for listening in servers:
        listening.close()
    try:
        await asyncio.wait_for(asyncio.gather(*(each.idle.wait() for each in handlers)), timeout=drain_seconds)
    except asyncio.TimeoutError:
        logger.warning("%d deliveries still running after %ss; stopping anyway",
                       sum(each.deliveries_in_flight for each in handlers), drain_seconds)
    for session in list(RelaySMTP.sessions):
        if session.transport is not None:
            session.transport.write(b"421 4.3.2 Server shutting down\r\n")
            session.transport.close()
    for listening in servers:
        await listening.wait_closed()
    await handler.lookups.close()
    await handler.storage.close()
    handler.verdicts.shutdown(wait=False, cancel_futures=True)
    logger.info("SMTP server stopped")


def run_forever(host: str, port: int, *, reuse_port: bool = False, submission_port: int | None = None) -> None:
    """`manage.py runsmtp`: serve until SIGTERM or SIGINT (`reuse_port`: SO_REUSEPORT;
    `submission_port`: the sandboxes' submission port too)."""
    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await serve(host, port, stop=stop, reuse_port=reuse_port, submission_port=submission_port)

    asyncio.run(main())
