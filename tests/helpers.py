"""What many test modules share (mail itself is tests/mail_corpus.py's): waiting with a
deadline (`answers`: for a web process), a free port, and one way to make each thing.

- `make_mailbox` writes a mailbox row directly (with its address reservation), for
  tests of the expiry engine and the operators that set up states the API cannot.
- `create_via_api` creates one through POST /api/v1/mailboxes, as a client would;
  `create_mailbox` the same for a ten-minute mailbox, returning its JSON.
- `earlier` moves rows' timestamps back (the database's clock decides; tests move rows, not
  time); `expire_now` expires a due mailbox as a cleanup task would; `a_delivery` writes a
  webhook delivery owed to `url`.
"""
import asyncio
import threading
import time
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import requests
from django.db import connection, transaction
from django.utils import timezone

from mailboxes.models import AddressReservation, Mailbox
from tests.ports import free_port  # noqa: F401  (the suite's tests import it from here)

ROOT = Path(__file__).resolve().parent.parent
DOMAIN = "relay.localhost"


@contextmanager
def row_held(model, pk):
    """While the block runs, another connection (a thread) holds this row with SELECT …
    FOR UPDATE, as a short write of another process would. Needs committed rows
    (django_db(transaction=True))."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():
                model.objects.select_for_update().get(pk=pk)
                held.set()
                release.wait(10)
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(10), "the row could not be held"
    try:
        yield
    finally:
        release.set()
        holder.join()


def answers(url: str, *, status: int | None = None, method: str = "GET", **request) -> bool:
    """For `wait_until`, whether a web process answers `url`: with `status` when given, else
    with anything below 500. False while it cannot answer yet: the port refuses, or the
    request times out because the worker is still importing the app behind a bound port."""
    try:
        answer = requests.request(method, url, timeout=5, **request)
    except requests.RequestException:
        return False
    return answer.status_code == status if status is not None else answer.status_code < 500


def wait_until(predicate, *, timeout: float, interval: float = 0.05, message: str = "condition"):
    """Poll `predicate` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


def make_mailbox(name: str, *, due: bool = False, stalwart=None, **fields) -> Mailbox:
    """A mailbox row `name@relay.localhost`: due a second ago with `due`, else in ten
    minutes (unless `expires_at` is given). With `stalwart`, it has an account there."""
    now = timezone.now()
    address = f"{name}@{DOMAIN}"
    fields.setdefault("expires_at", now - timedelta(seconds=1) if due else now + timedelta(minutes=10))
    if stalwart is not None:
        fields.setdefault("backend_id", stalwart.add_account(name))
    AddressReservation.objects.get_or_create(address=address)
    return Mailbox.objects.create(address=address, **fields)


def make_mailboxes(count: int, *, prefix: str, first_in: float, spread: float, stalwart=None) -> list[Mailbox]:
    """`count` mailbox rows (with Stalwart accounts when given `stalwart`), falling due
    over `spread` seconds starting `first_in` seconds from now."""
    now = timezone.now()
    mailboxes = [
        Mailbox(address=f"{prefix}{i}@{DOMAIN}", expires_at=now + timedelta(seconds=first_in + spread * i / count),
                backend_id=stalwart.add_account(f"{prefix}{i}") if stalwart is not None else "")
        for i in range(count)
    ]
    return Mailbox.objects.bulk_create(mailboxes, batch_size=1000)


def create_via_api(client, **body):
    """POST /api/v1/mailboxes with `body`; returns the response."""
    return client.post("/api/v1/mailboxes", body, format="json")


def listed(response, field: str) -> list:
    """`field` of each result of a list the API answered with 200."""
    assert response.status_code == 200, response.json()
    return [item[field] for item in response.json()["results"]]


def create_mailbox(client, **body) -> dict:
    """A ten-minute mailbox made through the API (201 asserted); returns its JSON."""
    response = create_via_api(client, **{"ttl_ms": 600_000, **body})
    assert response.status_code == 201, response.content
    return response.json()


def earlier(rows, delta: timedelta, *fields: str) -> None:
    """Move `fields` of `rows` (a queryset) back by `delta`: the rows as they will stand
    `delta` from now. The database's clock decides every time question (core.clock.db_now) and
    no test can move it, so a test moves the rows instead."""
    from django.db.models import F

    assert rows.update(**{field: F(field) - delta for field in fields})


def expire_now(mailbox: Mailbox) -> None:
    """Expire a due mailbox as a cleanup task does (its cleanup owed, nothing queued)."""
    from mailboxes.lifecycle import mailboxes_expire_due

    assert mailboxes_expire_due(mailbox_ids=[mailbox.id], announce=False) == [mailbox.id]


def a_delivery(url: str = "http://example.com/hook", *, payload: dict | None = None):
    """A webhook delivery owed to `url`, of a new account's webhook."""
    from accounts.models import Account
    from webhooks.models import Webhook, WebhookDelivery

    owner = Account.objects.create(login=f"owner{Account.objects.count()}")
    webhook = Webhook.objects.create(owner=owner, url=url, events=["message.received"], secret="whsec_dGVzdA==")
    return WebhookDelivery.objects.create(webhook=webhook, event="message.received", payload=payload or {},
                                          message_id=f"msg_{webhook.id}")


def deliver(raw: bytes, *addresses: str, mail_from: str = "a@example.com") -> list[int]:
    """Store `raw` for `addresses` as the SMTP server does after RCPT and DATA (without a
    socket); returns the new message ids."""
    from mailboxes.messages import recipient_by_address
    from relay.ingest import message_ingest

    recipients = [recipient_by_address(address) for address in addresses]
    assert all(recipients), f"not all of {addresses} take mail"
    return message_ingest(raw=raw, mail_from=mail_from, recipients=recipients)


def make_operations_scene() -> dict:
    """A known spread of what an operator watches (/metrics, the admin's first screen):
    mailboxes in each state, cleanups done and dead in the current minute and twenty
    minutes ago, an owed cleanup queued ten minutes ago, a failed mail and a dead webhook
    delivery. Returns the figures the scene should read as."""
    from accounts.models import Account
    from relay.models import OutboxMail, OutboxStatus
    from webhooks.models import DeliveryStatus, Webhook, WebhookDelivery

    now = timezone.now()
    earlier = now - timedelta(minutes=20)
    for i in range(3):
        make_mailbox(f"live{i}")
    for i in range(2):
        make_mailbox(f"done{i}", status="expired", expired_at=now, cleanup_state="done", cleanup_done_at=now)
    make_mailbox("done-earlier", status="expired", expired_at=earlier, cleanup_state="done", cleanup_done_at=earlier)
    make_mailbox("dead", status="deleted", deleted_at=now, cleanup_state="dead", cleanup_dead_at=now)
    make_mailbox("owed", status="expired", expired_at=now, cleanup_state="pending",
                 cleanup_queued_at=now - timedelta(minutes=10), cleanup_lease_until=now + timedelta(minutes=1))
    owner = Account.objects.create(login="ops", email="ops@example.com")
    OutboxMail.objects.create(to=["x@example.com"], subject="s", text="t", status=OutboxStatus.FAILED)
    OutboxMail.objects.create(to=["y@example.com"], subject="s", text="t", status=OutboxStatus.SENT)
    webhook = Webhook.objects.create(owner=owner, url="https://hooks.example.com/", events=["message.received"],
                                     secret="whsec_x")
    WebhookDelivery.objects.create(webhook=webhook, event="message.received", payload={}, message_id="msg_1",
                                   status=DeliveryStatus.FAILED)
    return {"active": 3, "expired": 4, "deleted": 1, "owed": 1, "dead": 1, "done": 3, "failed_mails": 1,
            "dead_deliveries": 1, "oldest_owed_seconds": 600, "done_this_minute": 2, "done_last_hour": 3}


def run_async(coroutine):
    """Run `coroutine` as a test's event loop, closing the database connection of the thread
    its pooled calls ran in (asgiref's one thread outside the web process)."""
    from asgiref.sync import sync_to_async
    from django.db import connections

    async def main():
        try:
            return await coroutine
        finally:
            await sync_to_async(connections.close_all)()

    return asyncio.run(main())


def headless_chromium(width: int = 1280):
    """Debian's Chromium through its chromedriver, headless, `width` px wide."""
    import shutil

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={width},900"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    driver.set_page_load_timeout(30)
    if width < 500:  # Chromium's window is never narrower than 500 px: a phone's width is emulated
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                               {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False})
    return driver
