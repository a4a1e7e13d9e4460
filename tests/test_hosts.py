"""Relay on several hosts (README, "Several hosts"; docs/architecture.md, "One clock"):
web, SMTP, two workers and beat each on a host of the suite's own (tests/hosts.py), apart
from PostgreSQL, the broker and the mail backend. One worker's clock runs five minutes
fast and the other's five minutes slow, the web host's three minutes slow, and the fast
worker's host loses its network mid-burst and gets it back. The mailboxes are made over
HTTP and mailed over SMTP on those hosts; then each must have been cleaned up exactly
once, none before its end, none receiving after it, none lost."""
import smtplib
import statistics
import sys
from urllib.parse import urlsplit

import pytest
import requests

from accounts.services import account_create_with_key
from mailboxes.models import Mailbox
from tests.conftest import CELERY, WEB_READY
from tests.expiry.workers import assert_each_deprovisioned_once_and_never_early, wait_settled
from tests.helpers import answers, free_port, wait_until
from tests.hosts import Hosts, why_no_hosts
from tests.mail_corpus import mail

pytestmark = pytest.mark.workers

BURST = 24
CLOCKS = {"web": "-3m", "fast": "+5m", "slow": "-5m"}


@pytest.fixture
def hosts():
    why = why_no_hosts()
    if why:
        pytest.skip(f"no hosts of the suite's own can be made here: {why}")
    made = Hosts()
    yield made
    made.remove_all()


def _moved(url: str, host, port: int) -> str:
    """`url` as a host reaches it: through the forwarder on its gateway."""
    parsed = urlsplit(url)
    user = f"{parsed.username}@" if parsed.username else ""
    return parsed._replace(netloc=f"{user}{host.gateway}:{port}").geturl()


def test_skewed_clocks_and_a_cut_link_end_every_mailbox_once_never_early_never_late(processes, stalwart, hosts):
    for name in ("web", "smtp", "fast", "slow", "beat"):
        hosts.add(name)
    urls = {"DATABASE_URL": processes.env["DATABASE_URL"], "CELERY_BROKER_URL": processes.env["CELERY_BROKER_URL"],
            "STALWART_URL": stalwart.url}
    ports = {variable: free_port() for variable in urls}
    for variable, url in urls.items():
        hosts.forward(urlsplit(url).port, ports[variable])

    def start(name: str, argv: list[str], ready_text: str, **env: str) -> None:
        host = hosts.hosts[name]
        moved = {variable: _moved(url, host, ports[variable]) for variable, url in urls.items()}
        processes.start(name, host.command(argv, clock_offset=CLOCKS.get(name)), ready_text=ready_text,
                        env={**moved, **env})

    web, smtp = hosts.hosts["web"], hosts.hosts["smtp"]
    start("web", [sys.executable, "-m", "gunicorn", "config.asgi", "-k", "core.serving.UvicornWorker", "-w", "1",
                  "-b", f"{web.address}:8000", "--timeout", "60"], WEB_READY,
          RELAY_MIN_TTL_MS="1000", DJANGO_ALLOWED_HOSTS=web.address)
    # Verdicts would ask DNS servers this host cannot reach; they are not what this test is about.
    start("smtp", [sys.executable, "manage.py", "runsmtp", "--host", smtp.address, "--port", "2525"], "SMTP listening",
          RELAY_SMTP_VERDICTS="false")
    for worker in ("fast", "slow"):
        start(worker, [*CELERY, "worker", "-P", "prefork", "-c", "2", "-n", f"{worker}@%h", "--without-gossip",
                       "--without-mingle", "--without-heartbeat", "-l", "INFO"], " ready.")
    start("beat", [*CELERY, "beat", "-l", "INFO", "--pidfile", str(processes.tmp_path / "beat.pid"),
                   "-s", str(processes.tmp_path / "beat-schedule")], "beat: Starting")
    processes.wait_ready()
    wait_until(lambda: answers(f"http://{web.address}:8000/api/v1/"), timeout=30, message="the web host to answer")

    _, key = account_create_with_key(login="hosts", plan="pro")
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {key}"
    made = []
    for number in range(BURST):
        if number == BURST // 3:
            hosts.cut("fast")  # mid-burst: the fast worker's host is cut off ...
        if number == 2 * BURST // 3:
            hosts.restore("fast")  # ... and comes back
        created = session.post(f"http://{web.address}:8000/api/v1/mailboxes", timeout=30,
                               json={"local_part": f"host{number}", "ttl_ms": 2000 + 250 * number})
        assert created.status_code == 201, created.text
        made.append(created.json())
        with smtplib.SMTP(smtp.address, 2525, timeout=30) as client:
            assert client.sendmail("a@example.com", [made[-1]["address"]], mail(made[-1]["address"], "Hi", "x")) == {}

    ids = [box["id"] for box in made]
    wait_settled(ids, timeout=120)
    mailboxes = list(Mailbox.objects.filter(id__in=ids))
    assert [m.cleanup_state for m in mailboxes] == ["done"] * BURST, "a cleanup was lost or given up"
    assert_each_deprovisioned_once_and_never_early(stalwart, mailboxes)
    early = [m.address for m in mailboxes if m.expired_at < m.expires_at]
    assert not early, f"ended before expires_at by the database's clock: {early}"
    assert all(m.message_count == 1 for m in mailboxes)
    with smtplib.SMTP(smtp.address, 2525, timeout=30) as client:  # after the end, nothing is taken
        client.ehlo()
        client.mail("a@example.com")
        assert {client.rcpt(m.address)[0] for m in mailboxes} == {550}
    lags = sorted((m.cleanup_done_at - m.expires_at).total_seconds() for m in mailboxes)
    print(f"expiry lag by the database's clock: median {statistics.median(lags):.2f} s, max {lags[-1]:.2f} s")
