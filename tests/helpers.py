"""What many test modules share: waiting with a deadline, and one way to make mailboxes.

- `make_mailbox` writes a mailbox row directly (with its address reservation), for
  tests of the expiry engine and the operators that set up states the API cannot.
- `create_via_api` creates one through POST /api/v1/mailboxes, as a client would.
"""
import time
from datetime import timedelta
from pathlib import Path

from django.utils import timezone

from mailboxes.models import AddressReservation, Mailbox

ROOT = Path(__file__).resolve().parent.parent
DOMAIN = "relay.localhost"


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


def deliver(raw: bytes, *addresses: str, mail_from: str = "a@example.com") -> list[int]:
    """Store `raw` for `addresses` as the SMTP server does after RCPT and DATA (without a
    socket); returns the new message ids."""
    from relay.smtp import deliver_message, recipient_mailbox

    recipients = [recipient_mailbox(address) for address in addresses]
    assert all(recipients), f"not all of {addresses} take mail"
    return deliver_message(raw=raw, mail_from=mail_from, recipients=recipients)
