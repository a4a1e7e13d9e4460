"""The suite's fixtures: API clients, the Stalwart stand-in and a Cyrus of its own, an SMTP
server in a thread, a sink for mail out, the broker, and real worker, beat, mailer and web
processes (Processes) against the test database."""
import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis
from aiosmtpd.controller import Controller
from django.conf import settings
from rest_framework.test import APIClient

from accounts.identity import caches_clear_all
from accounts.services import account_create_with_key
from tests.helpers import ROOT, answers, create_mailbox, free_port, wait_until
from tests.stalwart_fake import MAIL_SERVER_ID, TOKEN, FakeStalwart


def pytest_configure(config):
    if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
        pytest.exit("The suite runs on PostgreSQL and Redis: run it with `make test`.", returncode=2)


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix):
    """pytest-django's hook for the test database's settings: under xdist, the database is
    made from a template migrated once per run (tests/parallel.py)."""
    from tests.parallel import use_migrated_template

    use_migrated_template()


# --- Emptying the database between tests ---------------------------------------------------------
@pytest.fixture(scope="session", autouse=True)
def flush_by_delete():
    """A test that commits (transactional_db) ends with Django's flush, which on
    PostgreSQL is one TRUNCATE of every table: 0.25 s here each time, as PostgreSQL makes
    each table's files anew (over the suite, 646 s became 604). The tables hold a few rows
    by then, and a DELETE of each empties them in milliseconds, in the flush's one
    transaction, with the foreign keys checked at its commit: every one of Relay's is
    deferrable (one that is not would make the flush fail loudly, not leave rows), and no
    trigger fires on a delete. A flush asked to reset sequences or to cascade (none of
    the suite's) still truncates. Only the tests' process flushes this way; the product's
    flush command is untouched.

    The flush then sends `post_migrate`, whose receivers made the content types and
    permissions it had just deleted anew and the beat's schedules (0.15 s a test). No
    test changes the content types or the permissions, so the flush leaves those two
    tables alone and sends the one receiver whose rows tests do change: the schedules'
    (25 ms)."""
    from django.core.management.commands import flush
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate, post_migrate = DatabaseOperations.sql_flush, flush.emit_post_migrate_signal
    kept = {"django_content_type", "auth_permission"}

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if not tables or reset_sequences or allow_cascade:  # what DELETE cannot do as TRUNCATE does
            return truncate(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        return ["SET CONSTRAINTS ALL DEFERRED;"] + [
            f"{style.SQL_KEYWORD('DELETE FROM')} {style.SQL_FIELD(self.quote_name(table))};"
            for table in tables if table not in kept]

    def schedules_only(verbosity, interactive, db, **kwargs):
        from django.apps import apps

        from expiry.apps import sync_schedules
        sync_schedules(sender=apps.get_app_config("expiry"), using=db)

    DatabaseOperations.sql_flush, flush.emit_post_migrate_signal = sql_flush, schedules_only
    yield
    DatabaseOperations.sql_flush, flush.emit_post_migrate_signal = truncate, post_migrate


# --- DNS ----------------------------------------------------------------------------------------
@pytest.fixture(scope="session", autouse=True)
def dns_server(tmp_path_factory):
    """The suite's own DNS server (tests/dns_server.py), which every look-up of this process
    and of the processes it starts goes to (RELAY_DNS_RESOLVERS): verdicts on mail and
    domain checks read the zones tests write, and nothing asks the machine's resolver.
    None where NSD is not installed (the tests that need it skip)."""
    from core import dns as relay_dns
    from tests import dns_server as server_module

    if not server_module.installed():
        yield None
        return
    server = server_module.DnsServer(tmp_path_factory.mktemp("dns"), free_port()).start()
    os.environ["RELAY_DNS_RESOLVERS"] = f"127.0.0.1:{server.port}"
    settings.RELAY_DNS_RESOLVERS = [("127.0.0.1", server.port)]
    relay_dns.reset()
    yield server
    server.stop()


@pytest.fixture
def dns(dns_server):
    if dns_server is None:
        pytest.skip("NSD is not installed (scripts/test.sh installs Debian's nsd)")
    return dns_server


@pytest.fixture
def silent_dns(settings):
    """A DNS server that never answers (a UDP socket nobody reads), Relay pointed at it
    with a one-second budget."""
    from core import dns as relay_dns

    quiet = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    quiet.bind(("127.0.0.1", 0))
    settings.RELAY_DNS_RESOLVERS = [("127.0.0.1", quiet.getsockname()[1])]
    settings.RELAY_DNS_TIMEOUT_SECONDS = 1
    relay_dns.reset()
    yield
    quiet.close()
    relay_dns.reset()  # settings are restored after this; the next look-up reads them anew


@pytest.fixture
def dns_silent_for(dns_server, settings):
    """Point Relay at a forwarder in front of the suite's NSD that never answers for
    names under `silent.test`; the forwarder (its `dropped` counts the queries dropped)."""
    from core import dns as relay_dns
    from tests.dns_server import DroppingForwarder

    if dns_server is None:
        pytest.skip("NSD is not installed (scripts/test.sh installs Debian's nsd)")
    forwarder = DroppingForwarder(dns_server.port, "silent.test")
    settings.RELAY_DNS_RESOLVERS = [("127.0.0.1", forwarder.port)]
    relay_dns.reset()
    yield forwarder
    forwarder.close()
    relay_dns.reset()


@dataclass(frozen=True)
class Senders:
    """The senders of the verdict tests, published in the suite's DNS server. pass.test:
    SPF names 127.0.0.2 (-all), a DKIM key at sel._domainkey, DMARC p=reject.
    soft.test: SPF names 127.0.0.2 (~all). nodmarc.test: SPF and a key, no DMARC.
    `keys`: each signing domain's private key file (opendkim-genkey's)."""

    keys: dict
    dns_port: int
    listed: str = "127.0.0.2"    # the address the SPF records name
    unlisted: str = "127.0.0.3"  # one they do not


@pytest.fixture(scope="session")
def senders(dns_server, tmp_path_factory):
    from tests import dkim_keys

    if dns_server is None or not dkim_keys.available():
        pytest.skip("NSD or the DKIM tools are not installed (scripts/test.sh installs nsd, opendkim-tools and "
                    "libmail-dkim-perl)")
    keys = {}
    for domain in ("pass.test", "nodmarc.test"):
        keys[domain], record = dkim_keys.new_key(tmp_path_factory.mktemp(domain), domain, "sel")
        dns_server.publish(f"sel._domainkey.{domain}", "TXT", record)
        dns_server.publish(domain, "TXT", "v=spf1 ip4:127.0.0.2 -all")
    dns_server.publish("_dmarc.pass.test", "TXT", "v=DMARC1; p=reject")
    dns_server.publish("soft.test", "TXT", "v=spf1 ip4:127.0.0.2 ~all")
    return Senders(keys=keys, dns_port=dns_server.port)


# --- spamd ---------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def spamd_server(tmp_path_factory):
    """The suite's own spamd (tests/spamd_server.py), started once when a test asks for it."""
    from tests import spamd_server as server_module

    if not server_module.installed():
        pytest.skip("spamd is not installed (scripts/test.sh installs Debian's spamassassin and spamd)")
    server = server_module.SpamdServer(tmp_path_factory.mktemp("spamd"), free_port()).start()
    yield server
    server.stop()


@pytest.fixture
def checking_web(processes, spamd_server):
    """A web process that asks the suite's spamd, a worker that may check loopback links,
    and a loopback site for them: (base URL, site)."""
    from tests.link_site import Site

    site = Site()
    processes.env["RELAY_LINK_CHECK_ALLOW_PRIVATE"] = "true"
    processes.worker("worker")
    base = processes.start_web(env={"RELAY_SPAMD_URL": spamd_server.url})
    yield base, site
    site.stop()


# --- API clients ---------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def fresh_mail_reader():
    """A mail server one test found down is asked again at once by the next."""
    from relay.mailserver import reader

    reader.forget_failures()


@pytest.fixture(autouse=True)
def fresh_key_cache():
    """Each test resolves its keys anew: the database under the cache is rolled back
    between tests, and some tests change a plan or a status behind the services' back."""
    caches_clear_all()
    yield
    caches_clear_all()


@pytest.fixture
def api(db):
    return APIClient()


@pytest.fixture
def make_client(db):
    def make(name: str = "alice", plan: str = "pro") -> APIClient:
        _, key = account_create_with_key(login=name, plan=plan)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
        client.key = key
        return client

    return make


@pytest.fixture
def client_pro(make_client):
    return make_client("alice", "pro")


# --- Stalwart ------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def stalwart_server():
    fake = FakeStalwart().start()
    yield fake
    fake.stop()


@pytest.fixture
def new_box(client_pro):
    """Make a ten-minute mailbox of client_pro's through the API: new_box(**body) -> its JSON."""
    return lambda **body: create_mailbox(client_pro, **body)


@pytest.fixture
def box(new_box):
    """One ten-minute mailbox of client_pro's, as the API returned it."""
    return new_box()


@pytest.fixture
def stalwart(stalwart_server, settings):
    """The fake Stalwart, reset, and Relay configured to use it in this process."""
    stalwart_server.reset()
    settings.RELAY_BACKEND = "stalwart"
    settings.STALWART_URL = stalwart_server.url
    settings.STALWART_TOKEN = TOKEN
    settings.RELAY_AUTHSERV_ID = MAIL_SERVER_ID
    yield stalwart_server
    stalwart_server.reset()


# --- Cyrus ---------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def cyrus_server():
    """A Cyrus IMAP of the suite's own (tests/cyrus_server.py), for the whole session. Its
    directory is not under pytest's, which only root may enter: Cyrus runs as its own user."""
    from tests.cyrus_server import CyrusServer, installed

    if not installed():
        pytest.skip("Cyrus IMAP is not installed (scripts/test.sh installs cyrus-imapd, cyrus-caldav and "
                    "sasl2-bin where it may)")
    root = Path(tempfile.mkdtemp(prefix="relay-test-cyrus-"))
    server = CyrusServer(root).start()
    yield server
    server.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def cyrus(cyrus_server, settings):
    """The suite's Cyrus, running and without accounts, and Relay configured to use it in
    this process."""
    if cyrus_server.proc.poll() is not None:  # a test stopped it and failed before starting it again
        cyrus_server.start()
    cyrus_server.remove_accounts()
    for name, value in cyrus_server.relay_settings().items():
        setattr(settings, name, value)
    yield cyrus_server
    if cyrus_server.proc.poll() is not None:
        cyrus_server.start()


# --- SMTP ----------------------------------------------------------------------------------
class SmtpServerThread:
    def __init__(self, *, submission: bool = False, host: str = "127.0.0.1", submission_port: int = 0) -> None:
        self.host = host
        self.loop = asyncio.new_event_loop()
        self.stop_event: asyncio.Event | None = None
        self.address = None
        # The sandboxes' submission port too, on a free port of its own.
        self.submission = submission or bool(submission_port)
        self.submission_port_asked = submission_port
        self.submission_address = None
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from relay.inbound.server import serve

        asyncio.set_event_loop(self.loop)

        async def main() -> None:
            self.stop_event = asyncio.Event()
            await serve(self.host, 0, stop=self.stop_event, ready=self._on_ready, drain_seconds=10,
                        submission_port=self.submission_port_asked if self.submission else None,
                        submission_ready=lambda address: setattr(self, "submission_address", address))

        self.loop.run_until_complete(main())

    def _on_ready(self, address) -> None:
        self.address = address
        self.ready.set()

    def start(self) -> "SmtpServerThread":
        self.thread.start()
        assert self.ready.wait(10), "SMTP server did not start"
        return self

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.stop_event.set)
        self.thread.join(15)

    @property
    def port(self) -> int:
        return self.address[1]

    @property
    def submission_port(self) -> int:
        return self.submission_address[1]


@pytest.fixture(scope="session")
def certificates(tmp_path_factory):
    """A certificate authority of the test's own and a server certificate it signed for
    127.0.0.1 and localhost, made with the openssl command."""
    folder = tmp_path_factory.mktemp("tls")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True, timeout=60)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=Relay test CA")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
            "-subj", "/CN=localhost")
    (folder / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.pem", "-days", "2", "-extfile", "san.ext")
    return folder


@pytest.fixture
def smtp_server(transactional_db):
    server = SmtpServerThread().start()
    yield server
    server.stop()


# --- an SMTP sink for outbound mail ----------------------------------------------------------
class Sink:
    """An SMTP server that keeps what it receives, or refuses as told."""

    def __init__(self) -> None:
        self.received: list = []
        self.received_at: list[float] = []  # time.time() of each accepted message
        self.refuse: list[str] = []  # replies to DATA, used up one by one
        self.lock = threading.Lock()

    async def handle_DATA(self, server, session, envelope):
        with self.lock:
            if self.refuse:
                return self.refuse.pop(0)
            self.received.append(envelope)
            self.received_at.append(time.time())
        return "250 OK"


@pytest.fixture
def sink():
    """(handler, port) of a running SMTP sink."""
    handler = Sink()
    controller = Controller(handler, hostname="127.0.0.1", port=free_port())
    controller.start()
    yield handler, controller.port
    controller.stop()


# --- Celery worker processes -----------------------------------------------------------------
CELERY = [sys.executable, "-m", "celery", "-A", "config"]
# As docker-compose runs gunicorn: the longest request line gunicorn allows.
GUNICORN_LIMITS = ["--limit-request-line", "8190"]
# What a web worker logs once it has imported the app. Gunicorn's "Booting worker" comes
# before that import, with the port already bound: a request then waits for the import.
WEB_READY = "Application startup complete."


class Processes:
    """Real `celery worker` and `celery beat` processes against the test database."""

    def __init__(self, tmp_path: Path, env: dict) -> None:
        self.tmp_path = tmp_path
        self.env = env
        self.procs: dict[str, tuple[subprocess.Popen, Path]] = {}
        self.starting: list[tuple[str, str, int]] = []

    def _spawn(self, name: str, command: list[str], ready_text: str, env: dict | None = None,
               ready_count: int = 1) -> subprocess.Popen:
        """Start `command`; `wait_ready` then waits for `ready_text` in its log `ready_count`
        times (once per worker of a process that forks several)."""
        log = self.tmp_path / f"{name}.log"
        proc = subprocess.Popen(command, cwd=ROOT, env={**self.env, **(env or {})}, stdout=log.open("wb"),
                                stderr=subprocess.STDOUT, start_new_session=True)
        self.procs[name] = (proc, log)
        self.starting.append((name, ready_text, ready_count))
        return proc

    def wait_ready(self) -> None:
        """Wait for every process started so far to say it is ready (they start in parallel)."""
        for name, ready_text, count in self.starting:
            proc, log = self.procs[name]
            wait_until(lambda: log.read_text(errors="replace").count(ready_text) >= count or proc.poll() is not None,
                       timeout=60, interval=0.1, message=f"{name} to start")
            assert proc.poll() is None, f"{name} exited:\n{log.read_text(errors='replace')[-3000:]}"
        self.starting.clear()

    def start(self, name: str, command: list[str], *, ready_text: str, env: dict | None = None) -> subprocess.Popen:
        """Any command, followed like the others (tests/test_hosts.py: a process on a host)."""
        return self._spawn(name, command, ready_text, env=env)

    def worker(self, name: str, concurrency: int = 1, queues: str | None = None) -> subprocess.Popen:
        """A Celery worker taking every queue (as one started without -Q does), or `queues`."""
        return self._spawn(name, [*CELERY, "worker", "-P", "prefork", "-c", str(concurrency), "-n", f"{name}@%h",
                                  "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "INFO",
                                  *(["-Q", queues] if queues else [])],
                           ready_text=" ready.")

    def beat(self, name: str) -> subprocess.Popen:
        return self._spawn(name, [*CELERY, "beat", "-l", "INFO", "--pidfile", str(self.tmp_path / f"{name}.pid"),
                                  "-s", str(self.tmp_path / f"{name}-schedule")], ready_text="beat: Starting")

    def mailer(self, name: str, env: dict | None = None) -> subprocess.Popen:
        """`manage.py runmailer`, the outbox's collector."""
        return self._spawn(name, [sys.executable, "manage.py", "runmailer"], ready_text="connected; listening",
                           env=env)

    def web(self, name: str, port: int, env: dict | None = None, workers: int = 1) -> subprocess.Popen:
        """The API under gunicorn with uvicorn workers (ASGI), as docker-compose runs it."""
        return self._spawn(name, [sys.executable, "-m", "gunicorn", "config.asgi", "-k", "core.serving.UvicornWorker",
                                  "-w", str(workers),
                                  "-b", f"127.0.0.1:{port}", "--timeout", "60", *GUNICORN_LIMITS],
                           ready_text=WEB_READY, env=env, ready_count=workers)

    def start_web(self, name: str = "web", *, env: dict | None = None, workers: int = 1, wait: bool = True) -> str:
        """A web process on a free port; its base URL. With `wait`, once it answers."""
        port = free_port()
        self.web(name, port, env=env, workers=workers)
        base = f"http://127.0.0.1:{port}"
        if wait:
            self.wait_ready()
            wait_until(lambda: answers(f"{base}/api/v1/"), timeout=30, message=f"{name} to answer")
        return base

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        proc, _ = self.procs[name]
        os.killpg(proc.pid, sig)
        proc.wait(10)

    def log(self, name: str) -> str:
        return self.procs[name][1].read_text(errors="replace")

    def stop_all(self) -> None:
        """After a test: SIGTERM, then SIGKILL for what has not stopped within a few seconds
        (a worker's warm shutdown waits for a task held up on purpose; no test after this
        one needs it to finish)."""
        for proc, _ in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for proc, _ in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)


def _test_database_url() -> str:
    parts = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(parts._replace(path="/" + settings.DATABASES["default"]["NAME"]))


@pytest.fixture
def broker():
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    client.flushdb()  # no message from an earlier test may reach these workers
    yield client
    client.flushdb()


def _process_env(**more: str) -> dict:
    """The environment of a process the suite starts: the test database, and `more`."""
    return {**os.environ, "DATABASE_URL": _test_database_url(), "PYTHONUNBUFFERED": "1",
            "RELAY_LOG_TASKS": "true",  # the tests follow tasks by their log lines
            **more}


@pytest.fixture(scope="module")
def module_processes(django_db_setup, tmp_path_factory):
    """Processes that one test module shares (a web process its tests all talk to), on the
    local backend: starting one per test was most of such a test's time. Each test still
    gets its own rows (transactional_db) and an empty Redis (broker)."""
    procs = Processes(tmp_path_factory.mktemp("processes"), _process_env())
    yield procs
    procs.stop_all()


@pytest.fixture
def processes(transactional_db, stalwart, broker, tmp_path):
    env = _process_env(RELAY_BACKEND="stalwart", STALWART_URL=stalwart.url, STALWART_TOKEN=TOKEN,
                       RELAY_AUTHSERV_ID=MAIL_SERVER_ID)
    from core.schedules import install_schedules
    from relay.backends import keeps_accounts

    install_schedules(read_mail_server=keeps_accounts())  # beat reads the sweeps' schedules from the test database
    procs = Processes(tmp_path, env)
    yield procs
    procs.stop_all()
