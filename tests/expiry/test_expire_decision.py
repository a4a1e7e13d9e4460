"""Each case of the expire decision (docs/architecture.md): what one expire task does with one
mailbox, run in this process against the fake Stalwart. Real worker processes are in
workers.py (test_workers_redis.py, test_workers_rabbitmq.py); the sweep is in test_sweep.py."""
import threading
import uuid
from datetime import timedelta

import pytest
from django.db import connection

from expiry import cleanup
from expiry.cleanup import mailbox_cleanup
from expiry.tasks import expire_mailbox
from mailboxes.models import Mailbox
from relay.backends import TransientBackendError
from core.clock import db_now
from tests.helpers import earlier, expire_now, make_mailbox
from tests.stalwart_fake import CONCURRENCY, FORBIDDEN_IN_BODY, HTTP_503, NOT_FOUND, RATE_LIMITED, TIMEOUT, UNAUTHORIZED


def run_task(mailbox: Mailbox) -> str:
    """The real task, run eagerly: a retry re-applies it at once."""
    return expire_mailbox.apply(args=(str(mailbox.id),)).result


def test_not_yet_due_does_nothing(db, stalwart):
    mailbox = make_mailbox("later", stalwart=stalwart)
    assert run_task(mailbox) == "skipped"
    mailbox.refresh_from_db()
    assert (mailbox.status, mailbox.cleanup_state) == ("active", "")
    assert stalwart.calls == []


def test_due_is_deprovisioned_and_done(db, stalwart):
    mailbox = make_mailbox("due", due=True, stalwart=stalwart)
    expire_now(mailbox)
    assert run_task(mailbox) == "done"
    mailbox.refresh_from_db()
    assert (mailbox.status, mailbox.cleanup_state, mailbox.cleanup_attempts) == ("expired", "done", 1)
    assert mailbox.cleanup_done_at >= mailbox.expires_at
    assert stalwart.destroyed_names() == ["due"]


def test_a_task_queued_before_due_expires_the_mailbox_itself_once_due(db, stalwart):
    mailbox = make_mailbox("early", stalwart=stalwart)
    earlier(Mailbox.objects.filter(id=mailbox.id), timedelta(minutes=10), "expires_at")  # its end has come
    assert run_task(mailbox) == "done"
    mailbox.refresh_from_db()
    assert (mailbox.status, mailbox.cleanup_state) == ("expired", "done")


@pytest.mark.parametrize("how", ["no account", "notFound"])
def test_already_gone_counts_as_done(db, stalwart, how):
    mailbox = make_mailbox("gone", due=True, stalwart=stalwart if how == "notFound" else None)
    if how == "notFound":
        stalwart.fail(NOT_FOUND, name="gone")
    expire_now(mailbox)
    assert run_task(mailbox) == "done"
    mailbox.refresh_from_db()
    assert mailbox.cleanup_state == "done"
    assert stalwart.destroyed_names() == []


@pytest.mark.parametrize("kind", [HTTP_503, RATE_LIMITED, CONCURRENCY, TIMEOUT])
def test_transient_failure_is_retried_then_done(db, stalwart, kind):
    mailbox = make_mailbox("flaky", due=True, stalwart=stalwart)
    stalwart.fail(kind, name="flaky", times=2)
    expire_now(mailbox)
    assert run_task(mailbox) == "done"
    mailbox.refresh_from_db()
    assert (mailbox.cleanup_state, mailbox.cleanup_attempts) == ("done", 3)
    assert len(stalwart.destroy_calls("flaky")) == 3
    assert stalwart.destroyed_names() == ["flaky"]


def test_the_task_is_declared_with_celerys_retries_and_a_retry_after_sets_the_least_wait(db, monkeypatch, settings):
    assert expire_mailbox.autoretry_for == (TransientBackendError,) and expire_mailbox.retry_jitter is True
    assert expire_mailbox.retry_backoff == settings.RELAY_CLEANUP_RETRY_BACKOFF_SECONDS
    assert expire_mailbox.max_retries == settings.RELAY_CLEANUP_MAX_RETRIES
    errors = [TransientBackendError("busy"), TransientBackendError("slow down", retry_after=500)]

    def cleanup_failing_twice(**kwargs):
        if errors:
            raise errors.pop(0)
        return cleanup.CleanupOutcome.DONE

    monkeypatch.setattr(cleanup, "mailbox_cleanup", cleanup_failing_twice)
    countdowns, retry = [], expire_mailbox.retry
    monkeypatch.setattr(expire_mailbox, "retry", lambda *args, **kwargs: countdowns.append(kwargs["countdown"])
                        or retry(*args, **kwargs))
    assert expire_mailbox.apply(args=(str(uuid.uuid4()),)).result == "done"
    # The first: Celery's backoff with full jitter (autoretry_for); the second: no sooner
    # than the backend's Retry-After.
    assert 0 <= countdowns[0] <= settings.RELAY_CLEANUP_RETRY_BACKOFF_SECONDS and countdowns[1] >= 500


def test_failing_past_the_last_retry_is_dead_with_attempts_and_error(db, stalwart):
    mailbox = make_mailbox("broken", due=True, stalwart=stalwart)
    stalwart.fail(HTTP_503, name="broken")
    expire_now(mailbox)
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
    expire_now(mailbox)
    assert run_task(mailbox) == "dead"
    mailbox.refresh_from_db()
    assert (mailbox.cleanup_state, mailbox.cleanup_attempts) == ("dead", 1)
    assert mailbox.cleanup_last_error


def test_already_done_makes_no_backend_call(db, stalwart):
    mailbox = make_mailbox("twice", due=True, stalwart=stalwart)
    expire_now(mailbox)
    assert run_task(mailbox) == "done"
    calls = len(stalwart.calls)
    assert run_task(mailbox) == "skipped"  # a duplicate of the same message
    assert len(stalwart.calls) == calls


def test_a_running_cleanup_is_not_taken_by_a_second_task(db, stalwart):
    mailbox = make_mailbox("held", due=True, stalwart=stalwart)
    expire_now(mailbox)
    Mailbox.objects.filter(id=mailbox.id).update(cleanup_state="running")
    assert run_task(mailbox) == "skipped"
    assert stalwart.calls == []


def test_a_cleanup_that_keeps_dying_becomes_dead(db, stalwart):
    mailbox = make_mailbox("poison", due=True, stalwart=stalwart)
    expire_now(mailbox)
    Mailbox.objects.filter(id=mailbox.id).update(cleanup_attempts=4)  # four attempts died mid-call
    assert run_task(mailbox) == "dead"
    mailbox.refresh_from_db()
    assert mailbox.cleanup_state == "dead"
    assert stalwart.calls == []


@pytest.mark.django_db(transaction=True)
def test_two_workers_running_one_cleanup_deprovision_once(stalwart):
    stalwart.latency = 0.3
    mailbox = make_mailbox("contended", due=True, stalwart=stalwart)
    expire_now(mailbox)
    barrier = threading.Barrier(2)
    outcomes = []

    def work():
        barrier.wait()
        try:
            outcomes.append(mailbox_cleanup(mailbox_id=mailbox.id, retries=0))
        finally:
            connection.close()

    threads = [threading.Thread(target=work) for _ in range(2)]
    [t.start() for t in threads]
    [t.join(30) for t in threads]
    assert sorted(outcomes) == ["done", "skipped"]
    assert len(stalwart.destroy_calls("contended")) == 1


def test_a_scheduled_task_expires_and_cleans_up_its_mailbox_at_the_due_instant(db, stalwart):
    mailbox = make_mailbox("ontime", stalwart=stalwart)
    row = Mailbox.objects.filter(id=mailbox.id)
    # Its timer fires a hair early, by the database's clock: it comes back.
    due = db_now() + timedelta(milliseconds=500)
    row.update(expires_at=due, expiry_scheduled_for=due)
    assert run_task(mailbox) == "early"
    row.update(expires_at=db_now(), expiry_scheduled_for=db_now())  # now due
    assert run_task(mailbox) == "done"
    mailbox.refresh_from_db()
    assert (mailbox.status, mailbox.cleanup_state) == ("expired", "done")
    assert timedelta(0) <= mailbox.expired_at - mailbox.expires_at < timedelta(seconds=1)


# --- the local backend (the default): the same decisions, nothing outside the database ---------
def test_a_local_task_queued_before_due_expires_and_cleans_up_its_mailbox(db):
    mailbox = make_mailbox("local-early")
    earlier(Mailbox.objects.filter(id=mailbox.id), timedelta(minutes=10), "expires_at")  # its end has come
    assert run_task(mailbox) == "done"
    mailbox.refresh_from_db()
    assert (mailbox.status, mailbox.cleanup_state, mailbox.cleanup_attempts) == ("expired", "done", 1)


def test_a_local_cleanup_the_backend_refuses_is_dead_not_done(db, settings):
    settings.RELAY_LOCAL_FAIL_CLEANUP_PREFIX = "fail-"
    mailbox = make_mailbox("fail-local", due=True)
    expire_now(mailbox)
    assert run_task(mailbox) == "dead"
    mailbox.refresh_from_db()
    assert (mailbox.cleanup_state, mailbox.cleanup_attempts, mailbox.cleanup_done_at) == ("dead", 1, None)
    assert mailbox.cleanup_dead_at is not None and "RELAY_LOCAL_FAIL_CLEANUP_PREFIX" in mailbox.cleanup_last_error


def test_a_local_cleanup_that_raises_is_counted_and_its_error_kept(db, monkeypatch):
    from relay.backends.local import LocalBackend

    def broken(self, mailbox):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(LocalBackend, "deprovision", broken)
    mailbox = make_mailbox("local-broken", due=True)
    expire_now(mailbox)
    with pytest.raises(RuntimeError):
        mailbox_cleanup(mailbox_id=mailbox.id, retries=0)
    mailbox.refresh_from_db()
    # The claim counted one attempt; the error is kept, and the cleanup stays running
    # until its lease lapses and a sweep tries again.
    assert (mailbox.cleanup_state, mailbox.cleanup_attempts) == ("running", 1)
    assert mailbox.cleanup_last_error == "RuntimeError: disk on fire"


def test_a_local_cleanup_past_its_attempt_limit_is_dead(db):
    mailbox = make_mailbox("local-poison", due=True)
    expire_now(mailbox)
    Mailbox.objects.filter(id=mailbox.id).update(cleanup_attempts=4)  # four attempts died mid-call
    assert run_task(mailbox) == "dead"
    mailbox.refresh_from_db()
    assert (mailbox.cleanup_state, mailbox.cleanup_done_at) == ("dead", None)
