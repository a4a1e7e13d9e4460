"""The outbox and `runmailer` (docs/api.md): batching by count and timeout, any number of
mailers, a killed database connection, a flushed broker, retries and dead letters. Real
PostgreSQL, a real SMTP sink, real worker and mailer processes."""
from collections import Counter
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from accounts.models import Account, Token
from relay.outbox.account_mail import account_recovery_request, account_sign_up
from relay.models import OutboxMail, OutboxStatus
from relay.outbox.operators import mails_requeue
from relay.outbox.send import batch_claim, batch_send
from tests.helpers import create_via_api, wait_until


def sign_ups(count: int, start: int = 0) -> None:
    """`count` sign-ups, each its own transaction (so each NOTIFYs on commit)."""
    for i in range(start, start + count):
        account_sign_up(email=f"user{i}@example.com", login=f"user{i}")


def all_sent(count: int) -> bool:
    return OutboxMail.objects.filter(status=OutboxStatus.SENT).count() == count


def delivered_once(handler, count: int) -> None:
    recipients = Counter(rcpt for envelope in handler.received for rcpt in envelope.rcpt_tos)
    assert len(recipients) == count, f"{len(recipients)} distinct recipients, expected {count}"
    assert set(recipients.values()) == {1}, [r for r, n in recipients.items() if n > 1]


@pytest.fixture
def mail_stack(processes, sink):
    """A worker sending through the sink; mailers are started by each test."""
    processes.env["EMAIL_URL"] = f"smtp://127.0.0.1:{sink[1]}"
    return processes, sink[0]


# --- in-process: what a batch does with each mail ------------------------------------------------
def test_a_token_mail_whose_token_was_used_is_skipped_and_its_link_dropped(db, mailoutbox):
    sign_ups(1)
    Token.objects.update(consumed_at=timezone.now())
    claim, ids = batch_claim(limit=10)
    assert batch_send(claim=claim, mail_ids=ids) == {"skipped": 1}
    mail = OutboxMail.objects.get()
    assert mail.status == "skipped" and "token" in mail.last_error and mail.text == "" and mail.html == ""
    assert mailoutbox == []


def test_recovery_mails_are_claimed_before_activation_and_sends(db, client_pro):
    box = create_via_api(client_pro).json()
    client_pro.post(f"/api/v1/mailboxes/{box['id']}/messages", {"to": ["a@example.com"], "subject": "s", "text": "t"},
                    format="json")
    sign_ups(1)
    Account.objects.filter(login="alice").update(email="alice@example.com")
    account_recovery_request(email="alice@example.com")
    _, ids = batch_claim(limit=10)
    kinds = dict(OutboxMail.objects.values_list("id", "kind"))
    assert [kinds[i] for i in ids] == ["recovery", "activation", "send"]


def test_no_more_than_max_per_second_leave_in_any_second(db, sink, settings):
    handler, port = sink
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
    settings.RELAY_MAILER_MAX_PER_SECOND = 4
    sign_ups(10)
    claim, ids = batch_claim(limit=50)
    assert batch_send(claim=claim, mail_ids=ids) == {"sent": 10}
    per_second = Counter(int(at) for at in handler.received_at)
    assert sum(per_second.values()) == 10
    assert max(per_second.values()) <= 4 and len(per_second) >= 3


def test_a_claimed_batch_is_claimed_by_no_one_else_until_its_lease_lapses(db, settings):
    sign_ups(3)
    first, ids = batch_claim(limit=10)
    assert len(ids) == 3 and batch_claim(limit=10)[1] == []
    OutboxMail.objects.update(lease_until=timezone.now() - timedelta(seconds=1))
    second, again = batch_claim(limit=10)
    assert sorted(again) == sorted(ids) and second != first
    # The first batch's worker, late, finds nothing it still holds.
    assert batch_send(claim=first, mail_ids=ids) == {}


# --- processes ------------------------------------------------------------------------------------
@pytest.mark.workers
def test_a_full_batch_leaves_at_once_and_the_rest_after_the_timeout(mail_stack):
    processes, handler = mail_stack
    processes.worker("worker")
    processes.mailer("mailer", env={"RELAY_MAILER_BATCH_LIMIT": "3", "RELAY_MAILER_BATCH_TIMEOUT_MS": "8000"})
    processes.wait_ready()
    sign_ups(5)
    wait_until(lambda: all_sent(5), timeout=30, message="5 activation mails sent")
    rows = list(OutboxMail.objects.order_by("id"))
    batches = Counter(row.claim for row in rows)
    assert sorted(batches.values()) == [2, 3]
    full = [row for row in rows if batches[row.claim] == 3]
    rest = [row for row in rows if batches[row.claim] == 2]
    # The batch of 3: claimed when its third notification came, not at the 8 s timeout
    # (the guard is half of it: a claim on notification takes milliseconds).
    assert (full[0].claimed_at - max(row.created_at for row in full)).total_seconds() < 4
    # The batch of 2: claimed when the timeout ran out, not before (the upper bound only
    # catches a mailer that never claimed on its timeout).
    waited = (rest[0].claimed_at - max(row.created_at for row in rest)).total_seconds()
    assert 7.5 <= waited < 30, waited
    delivered_once(handler, 5)
    assert "batch limit reached" in processes.log("mailer") and "batch timeout" in processes.log("mailer")


@pytest.mark.workers
def test_two_mailers_and_200_sign_ups_send_every_mail_exactly_once(mail_stack):
    processes, handler = mail_stack
    processes.worker("worker", concurrency=4)
    processes.mailer("mailer-1", env={"RELAY_MAILER_BATCH_LIMIT": "10", "RELAY_MAILER_BATCH_TIMEOUT_MS": "200"})
    processes.mailer("mailer-2", env={"RELAY_MAILER_BATCH_LIMIT": "10", "RELAY_MAILER_BATCH_TIMEOUT_MS": "200"})
    processes.wait_ready()
    sign_ups(200)
    wait_until(lambda: all_sent(200), timeout=90, message="200 activation mails sent")
    delivered_once(handler, 200)
    assert OutboxMail.objects.filter(attempts=1).count() == 200


@pytest.mark.workers
def test_a_mailer_whose_connection_is_terminated_reconnects_and_loses_nothing(mail_stack):
    processes, handler = mail_stack
    processes.worker("worker", concurrency=2)
    processes.mailer("mailer", env={"RELAY_MAILER_BATCH_LIMIT": "5", "RELAY_MAILER_BATCH_TIMEOUT_MS": "300"})
    processes.wait_ready()
    sign_ups(20)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                       "WHERE application_name = 'relay-mailer'")
        assert cursor.fetchone()[0] >= 1
    sign_ups(20, start=20)
    wait_until(lambda: all_sent(40), timeout=60, message="40 mails sent across the reconnection")
    delivered_once(handler, 40)
    log = processes.log("mailer")
    assert "lost the database connection" in log and log.count("connected; listening") >= 2


@pytest.mark.workers
def test_mails_whose_tasks_were_flushed_from_the_broker_still_leave_through_the_lease(mail_stack, broker):
    processes, handler = mail_stack
    processes.env["RELAY_MAILER_LEASE_SECONDS"] = "3"
    processes.mailer("mailer", env={"RELAY_MAILER_BATCH_LIMIT": "2", "RELAY_MAILER_BATCH_TIMEOUT_MS": "200"})
    processes.wait_ready()
    sign_ups(5)
    # No worker yet: the batches are claimed and their tasks wait in the broker.
    wait_until(lambda: OutboxMail.objects.filter(status=OutboxStatus.SENDING).count() == 5, timeout=20,
               message="all 5 claimed")
    broker.flushdb()
    processes.worker("worker")
    processes.wait_ready()
    wait_until(lambda: all_sent(5), timeout=60, message="the flushed mails sent after their lease")
    delivered_once(handler, 5)
    assert "lapsed or missed" in processes.log("mailer")


@pytest.mark.workers
def test_a_451_is_retried_until_sent(mail_stack):
    processes, handler = mail_stack
    handler.refuse = ["451 4.3.0 try later"]
    processes.worker("worker")
    processes.mailer("mailer")
    processes.wait_ready()
    sign_ups(1)
    wait_until(lambda: all_sent(1), timeout=30, message="the mail sent on its second attempt")
    assert OutboxMail.objects.get().attempts == 2
    delivered_once(handler, 1)


@pytest.mark.workers
def test_a_550_is_a_dead_letter_that_can_be_requeued(mail_stack):
    processes, handler = mail_stack
    handler.refuse = ["550 5.1.1 no such user"]
    processes.worker("worker")
    processes.mailer("mailer")
    processes.wait_ready()
    sign_ups(1)
    wait_until(lambda: OutboxMail.objects.filter(status=OutboxStatus.FAILED).exists(), timeout=30,
               message="the mail to fail")
    mail = OutboxMail.objects.get()
    assert mail.attempts == 1 and "550" in mail.last_error and handler.received == []
    assert mails_requeue(mail_ids=[mail.id]) == 1
    wait_until(lambda: all_sent(1), timeout=30, message="the requeued mail sent")
    delivered_once(handler, 1)
