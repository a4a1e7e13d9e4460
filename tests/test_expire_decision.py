"""Each case of the expire decision (SPEC §6): what one expire task does with one
mailbox, run in this process against the fake Stalwart. Real worker processes are in
test_workers.py; the sweep is in test_sweep.py."""
import threading
from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext

from expiry.cleanup import mailbox_cleanup
from expiry.tasks import expire_mailbox
from mailboxes.ending import mailboxes_expire_due
from mailboxes.models import Mailbox
from tests.helpers import make_mailbox
from tests.stalwart_fake import CONCURRENCY, FORBIDDEN_IN_BODY, HTTP_503, NOT_FOUND, RATE_LIMITED, TIMEOUT, UNAUTHORIZED


def expire(mailbox: Mailbox) -> None:
    """What the sweep does for a due mailbox, without publishing anything."""
    assert mailboxes_expire_due(mailbox_ids=[mailbox.id], publish=False) == [mailbox.id]


def run_task(mailbox: Mailbox) -> str:
    """The real task, run eagerly: Celery's autoretry re-applies it at once."""
    return expire_mailbox.apply(args=(str(mailbox.id),)).result


def test_not_yet_due_does_nothing(db, stalwart):
    mailbox = make_mailbox("later", stalwart=stalwart)
    assert run_task(mailbox) == "skipped"
    mailbox.refresh_from_db()
    assert (mailbox.status, mailbox.cleanup_state) == ("active", "")
    assert stalwart.calls == []


def test_due_is_deprovisioned_and_done(db, stalwart):
    mailbox = make_mailbox("due", due=True, stalwart=stalwart)
    expire(mailbox)
    assert run_task(mailbox) == "done"
    mailbox.refresh_from_db()
    assert (mailbox.status, mailbox.cleanup_state, mailbox.cleanup_attempts) == ("expired", "done", 1)
    assert mailbox.cleanup_done_at >= mailbox.expires_at
    assert stalwart.destroyed_names() == ["due"]


def test_a_task_queued_before_due_expires_the_mailbox_itself_once_due(db, stalwart):
    mailbox = make_mailbox("early", stalwart=stalwart)
    with time_machine.travel(mailbox.expires_at + timedelta(milliseconds=1), tick=False):
        assert run_task(mailbox) == "done"
    mailbox.refresh_from_db()
    assert (mailbox.status, mailbox.cleanup_state) == ("expired", "done")


@pytest.mark.parametrize("how", ["no account", "notFound"])
def test_already_gone_counts_as_done(db, stalwart, how):
    mailbox = make_mailbox("gone", due=True, stalwart=stalwart if how == "notFound" else None)
    if how == "notFound":
        stalwart.fail(NOT_FOUND, name="gone")
    expire(mailbox)
    assert run_task(mailbox) == "done"
    mailbox.refresh_from_db()
    assert mailbox.cleanup_state == "done"
    assert stalwart.destroyed_names() == []


@pytest.mark.parametrize("kind", [HTTP_503, RATE_LIMITED, CONCURRENCY, TIMEOUT])
def test_transient_failure_is_retried_then_done(db, stalwart, kind):
    mailbox = make_mailbox("flaky", due=True, stalwart=stalwart)
    stalwart.fail(kind, name="flaky", times=2)
    expire(mailbox)
    assert run_task(mailbox) == "done"
    mailbox.refresh_from_db()
    assert (mailbox.cleanup_state, mailbox.cleanup_attempts) == ("done", 3)
    assert len(stalwart.destroy_calls("flaky")) == 3
    assert stalwart.destroyed_names() == ["flaky"]


def test_failing_past_the_last_retry_is_dead_with_attempts_and_error(db, stalwart):
    mailbox = make_mailbox("broken", due=True, stalwart=stalwart)
    stalwart.fail(HTTP_503, name="broken")
    expire(mailbox)
    assert run_task(mailbox) == "dead"
    mailbox.refresh_from_db()
    assert (mailbox.cleanup_state, mailbox.cleanup_attempts) == ("dead", 4)  # 1 try + max_retries 3
    assert "503" in mailbox.cleanup_last_error
    assert mailbox.cleanup_lease_until is None  # no sweep will pick it up again by itself
    assert len(stalwart.destroy_calls("broken")) == 4


@pytest.mark.parametrize("kind", [UNAUTHORIZED, FORBIDDEN_IN_BODY])
def test_permanent_error_is_dead_at_once(db, stalwart, kind):
    mailbox = make_mailbox("refused", due=True, stalwart=stalwart)
    stalwart.fail(kind, name="refused")
    expire(mailbox)
    assert run_task(mailbox) == "dead"
    mailbox.refresh_from_db()
    assert (mailbox.cleanup_state, mailbox.cleanup_attempts) == ("dead", 1)
    assert mailbox.cleanup_last_error


def test_already_done_makes_no_backend_call(db, stalwart):
    mailbox = make_mailbox("twice", due=True, stalwart=stalwart)
    expire(mailbox)
    assert run_task(mailbox) == "done"
    calls = len(stalwart.calls)
    assert run_task(mailbox) == "skipped"  # a duplicate of the same message
    assert len(stalwart.calls) == calls


def test_a_running_cleanup_is_not_taken_by_a_second_task(db, stalwart):
    mailbox = make_mailbox("held", due=True, stalwart=stalwart)
    expire(mailbox)
    Mailbox.objects.filter(id=mailbox.id).update(cleanup_state="running")
    assert run_task(mailbox) == "skipped"
    assert stalwart.calls == []


def test_a_cleanup_that_keeps_dying_becomes_dead(db, stalwart):
    mailbox = make_mailbox("poison", due=True, stalwart=stalwart)
    expire(mailbox)
    Mailbox.objects.filter(id=mailbox.id).update(cleanup_attempts=4)  # four attempts died mid-call
    assert run_task(mailbox) == "dead"
    mailbox.refresh_from_db()
    assert mailbox.cleanup_state == "dead"
    assert stalwart.calls == []


@pytest.mark.django_db(transaction=True)
def test_two_workers_running_one_cleanup_deprovision_once(stalwart):
    stalwart.latency = 0.3
    mailbox = make_mailbox("contended", due=True, stalwart=stalwart)
    expire(mailbox)
    barrier = threading.Barrier(2)
    outcomes = []

    def work():
        barrier.wait()
        try:
            outcomes.append(mailbox_cleanup(mailbox_id=mailbox.id, retry_wait_max_seconds=1))
        finally:
            connection.close()

    threads = [threading.Thread(target=work) for _ in range(2)]
    [t.start() for t in threads]
    [t.join(30) for t in threads]
    assert sorted(outcomes) == ["done", "skipped"]
    assert len(stalwart.destroy_calls("contended")) == 1


def test_a_scheduled_task_expires_and_cleans_up_its_mailbox_at_the_due_instant(db, stalwart):
    mailbox = make_mailbox("ontime", stalwart=stalwart)
    Mailbox.objects.filter(id=mailbox.id).update(expiry_scheduled_for=mailbox.expires_at)
    with time_machine.travel(mailbox.expires_at - timedelta(milliseconds=5), tick=False):
        assert run_task(mailbox) == "early"  # the timer fired a hair early: it comes back
    with time_machine.travel(mailbox.expires_at, tick=False):
        assert run_task(mailbox) == "done"
    mailbox.refresh_from_db()
    assert (mailbox.status, mailbox.cleanup_state, mailbox.expired_at) == ("expired", "done", mailbox.expires_at)


# --- the local backend: nothing outside the database, so one transaction per cleanup ------------
def _mailbox_updates(queries) -> list[str]:
    return [q["sql"] for q in queries if q["sql"].startswith(f'UPDATE "{Mailbox._meta.db_table}"')
            or q["sql"].startswith(f"UPDATE {Mailbox._meta.db_table}")]


def test_a_local_cleanup_claims_and_records_its_outcome_in_one_statement(db):
    mailbox = make_mailbox("local-due", due=True)
    expire(mailbox)
    with CaptureQueriesContext(connection) as queries:
        assert run_task(mailbox) == "done"
    assert len(_mailbox_updates(queries.captured_queries)) == 1
    mailbox.refresh_from_db()
    assert (mailbox.cleanup_state, mailbox.cleanup_attempts, mailbox.cleanup_claim, mailbox.cleanup_lease_until) == \
        ("done", 1, None, None)
    assert mailbox.cleanup_done_at >= mailbox.expires_at
    assert run_task(mailbox) == "skipped"  # a twin task finds nothing to take


def test_a_local_task_queued_before_due_expires_and_cleans_up_its_mailbox(db):
    mailbox = make_mailbox("local-early")
    with time_machine.travel(mailbox.expires_at + timedelta(milliseconds=1), tick=False):
        assert run_task(mailbox) == "done"
    mailbox.refresh_from_db()
    assert (mailbox.status, mailbox.cleanup_state, mailbox.cleanup_attempts) == ("expired", "done", 1)


def test_a_local_cleanup_the_backend_refuses_is_dead_not_done(db, settings):
    settings.RELAY_LOCAL_FAIL_CLEANUP_PREFIX = "fail-"
    mailbox = make_mailbox("fail-local", due=True)
    expire(mailbox)
    assert run_task(mailbox) == "dead"
    mailbox.refresh_from_db()
    assert (mailbox.cleanup_state, mailbox.cleanup_attempts, mailbox.cleanup_done_at) == ("dead", 1, None)
    assert mailbox.cleanup_dead_at is not None and "RELAY_LOCAL_FAIL_CLEANUP_PREFIX" in mailbox.cleanup_last_error


def test_a_local_cleanup_that_raises_anything_else_is_undone_and_counted_by_the_general_path(db, monkeypatch):
    from relay.backends.local import LocalBackend

    def broken(self, mailbox):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(LocalBackend, "deprovision", broken)
    mailbox = make_mailbox("local-broken", due=True)
    expire(mailbox)
    with pytest.raises(RuntimeError):
        mailbox_cleanup(mailbox_id=mailbox.id, retry_wait_max_seconds=1)
    mailbox.refresh_from_db()
    # The one-transaction attempt left no trace; the general path's claim counted one
    # attempt, kept the error, and left the cleanup running until its lease lapses.
    assert (mailbox.cleanup_state, mailbox.cleanup_attempts) == ("running", 1)
    assert mailbox.cleanup_last_error == "RuntimeError: disk on fire"


def test_a_local_cleanup_at_its_attempt_limit_goes_the_general_way_and_is_dead(db):
    mailbox = make_mailbox("local-poison", due=True)
    expire(mailbox)
    Mailbox.objects.filter(id=mailbox.id).update(cleanup_attempts=4)  # four attempts died mid-call
    assert run_task(mailbox) == "dead"
    mailbox.refresh_from_db()
    assert (mailbox.cleanup_state, mailbox.cleanup_done_at) == ("dead", None)


@pytest.mark.django_db(transaction=True)
def test_a_local_cleanup_cut_off_mid_transaction_is_still_pending_for_the_sweep(monkeypatch):
    """A worker killed between the UPDATE and the commit: PostgreSQL rolls back what its
    dropped connection had not committed. Here the transaction is cut off from inside
    (an exception no handler takes, as a kill takes none), while a second connection
    watches the row."""
    from relay.backends.local import LocalBackend

    mailbox = make_mailbox("local-killed", due=True)
    expire(mailbox)
    inside, cut = threading.Event(), threading.Event()

    class Killed(BaseException):
        pass

    def hangs(self, mailbox):
        inside.set()
        cut.wait(10)
        raise Killed()

    monkeypatch.setattr(LocalBackend, "deprovision", hangs)

    def work():
        try:
            mailbox_cleanup(mailbox_id=mailbox.id, retry_wait_max_seconds=1)
        except Killed:
            pass
        finally:
            connection.close()

    worker = threading.Thread(target=work)
    worker.start()
    assert inside.wait(10)
    # Mid-transaction, others still see the cleanup pending, as the sweep would.
    assert Mailbox.objects.get(id=mailbox.id).cleanup_state == "pending"
    cut.set()
    worker.join(10)
    mailbox.refresh_from_db()
    assert (mailbox.cleanup_state, mailbox.cleanup_attempts, mailbox.cleanup_done_at) == ("pending", 0, None)
    assert mailbox.cleanup_lease_until is not None  # the sweep queues it again once this lapses
