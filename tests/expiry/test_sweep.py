"""The sweep (docs/architecture.md): what it expires, what it requeues and when, what it schedules
ahead, and that two sweeps at once never claim the same mailbox."""
import logging
import threading
from datetime import timedelta

import pytest
from celery import current_app
from django.conf import settings
from django.db import connection
from django.utils import timezone

from expiry import cleanup, sweep
from expiry.cleanup import EXPIRE_TASK
from expiry.sweep import schedule_upcoming, sweep_due_and_lapsed
from mailboxes.models import Mailbox
from core.clock import db_now
from tests.helpers import earlier, expire_now, make_mailbox, make_mailboxes

# The times a cleanup's bookkeeping is judged by.
CLEANUP_TIMES = ("cleanup_lease_until", "cleanup_queued_at")


@pytest.fixture
def queue_length(monkeypatch):
    """Set what the sweep reads as the length of the expire tasks' queue."""
    def set_length(length: int) -> None:
        monkeypatch.setattr(sweep, "queue_length", lambda name: length)

    return set_length


def test_a_sweep_over_an_empty_redis_queue_reads_0_and_logs_no_warning(db, broker, caplog):
    """On Redis an empty queue is a missing key: a normal state, not a broker fault."""
    assert broker.llen(settings.CELERY_TASK_DEFAULT_QUEUE) == 0
    with caplog.at_level(logging.INFO):
        assert cleanup.queue_length(settings.CELERY_TASK_DEFAULT_QUEUE) == 0
        sweep_due_and_lapsed()
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_the_queue_length_reads_what_waits_in_redis(db, broker):
    name = settings.CELERY_TASK_DEFAULT_QUEUE
    broker.rpush(name, b"{}", b"{}", b"{}")
    assert cleanup.queue_length(name) == 3


def test_a_broker_that_cannot_answer_warns_once_a_minute_not_once_a_sweep(db, monkeypatch, caplog):
    monkeypatch.setattr(cleanup, "_last_queue_length_warning", 0.0)
    monkeypatch.setattr(current_app.conf, "broker_read_url", "redis://127.0.0.1:1/0")
    with caplog.at_level(logging.WARNING):
        lengths = [cleanup.queue_length("relay") for _ in range(3)]
    assert lengths == [None, None, None]
    warnings = [r for r in caplog.records if "could not read the length" in r.getMessage()]
    assert len(warnings) == 1


def test_sweep_with_nothing_due_makes_no_backend_call(db, stalwart):
    make_mailbox("future", stalwart=stalwart)
    result = sweep_due_and_lapsed()
    assert (result.expired, result.requeued) == (0, 0)
    assert stalwart.calls == []
    assert Mailbox.objects.get().status == "active"


def test_sweep_expires_a_due_mailbox_and_owes_its_cleanup(db, stalwart):
    mailbox = make_mailbox("due", due=True, stalwart=stalwart)
    assert sweep_due_and_lapsed().expired == 1
    mailbox.refresh_from_db()
    assert (mailbox.status, mailbox.cleanup_state) == ("expired", "pending")
    assert mailbox.cleanup_lease_until > timezone.now()


def test_sweep_requeues_a_cleanup_whose_lease_lapsed_keeping_its_attempts(db, stalwart, queue_length):
    queue_length(0)
    mailbox = make_mailbox("lapsed", due=True, stalwart=stalwart)
    expire_now(mailbox)
    Mailbox.objects.filter(id=mailbox.id).update(cleanup_state="running", cleanup_attempts=2)
    assert sweep_due_and_lapsed().requeued == 0  # lease still running
    earlier(Mailbox.objects.filter(id=mailbox.id), timedelta(minutes=5), *CLEANUP_TIMES)  # five minutes on
    assert sweep_due_and_lapsed().requeued == 1
    mailbox.refresh_from_db()
    assert (mailbox.cleanup_state, mailbox.cleanup_attempts) == ("pending", 2)


def test_one_sweep_takes_at_most_its_batches_and_the_next_takes_the_rest(db, stalwart, settings, monkeypatch):
    settings.RELAY_SWEEP_MAX_BATCHES = 3
    make_mailboxes(70, prefix="capped", first_in=-1, spread=0)
    published = []
    monkeypatch.setattr(cleanup, "queue_cleanups_after_commit", lambda ids, **kwargs: published.extend(ids))
    assert sweep_due_and_lapsed(batch_size=10).expired == 30
    assert len(published) == 30
    assert Mailbox.objects.filter(status="active").count() == 40
    assert [sweep_due_and_lapsed(batch_size=10).expired for _ in range(3)] == [30, 10, 0]
    assert len(published) == len(set(published)) == 70


@pytest.mark.django_db(transaction=True)
def test_two_sweeps_at_once_claim_disjoint_mailboxes(stalwart, monkeypatch, settings):
    settings.RELAY_SWEEP_MAX_BATCHES = 1000  # both sweeps run until nothing is due
    make_mailboxes(3000, prefix="m", first_in=-1, spread=0)
    claimed: list[list] = [[], []]

    def record(mailbox_ids, **kwargs):
        claimed[int(threading.current_thread().name)].extend(mailbox_ids)

    monkeypatch.setattr(cleanup, "queue_cleanups_after_commit", record)
    barrier = threading.Barrier(2)

    def run():
        barrier.wait()
        try:
            sweep_due_and_lapsed(batch_size=50)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, name=str(i)) for i in range(2)]
    [t.start() for t in threads]
    [t.join(120) for t in threads]
    assert claimed[0] and claimed[1], "both sweeps should have found work"
    assert not set(claimed[0]) & set(claimed[1])
    assert len(claimed[0]) + len(claimed[1]) == 3000
    assert Mailbox.objects.filter(status="expired", cleanup_state="pending").count() == 3000


def test_a_pending_cleanup_requeued_again_and_again_waits_twice_as_long_each_time(db, stalwart, settings,
                                                                                 queue_length):
    queue_length(0)  # the queue is drained: the task is lost
    mailbox = make_mailbox("backlogged", due=True, stalwart=stalwart)
    expire_now(mailbox)
    lease = timedelta(seconds=settings.RELAY_CLEANUP_LEASE_SECONDS)
    row = Mailbox.objects.filter(id=mailbox.id)
    waits = []
    for _ in range(4):
        earlier(row, row.get().cleanup_lease_until - db_now(), *CLEANUP_TIMES)  # on to the lease's end
        at = row.get().cleanup_lease_until
        assert sweep_due_and_lapsed().requeued == 1
        waits.append(row.get().cleanup_lease_until - at)
    # The database's clock moves on by the milliseconds the loop takes.
    for wait, expected in zip(waits, [lease, 2 * lease, 4 * lease, 8 * lease]):
        assert abs(wait - expected) < timedelta(milliseconds=500), waits
    assert Mailbox.objects.get(id=mailbox.id).cleanup_attempts == 0  # waiting is not an attempt


def test_sweep_schedules_mailboxes_falling_due_before_the_next_sweeps_once(db, stalwart, monkeypatch,
                                                                           django_capture_on_commit_callbacks):
    scheduled = []
    monkeypatch.setattr(current_app, "send_task",
                        lambda name, args, eta=None, **kw: scheduled.append((args[0], eta)) if name == EXPIRE_TASK else None)
    soon = make_mailbox("soon", stalwart=stalwart, expires_at=timezone.now() + timedelta(seconds=1))
    make_mailbox("later", stalwart=stalwart)  # ten minutes away: not yet
    with django_capture_on_commit_callbacks(execute=True):
        assert schedule_upcoming() == 1
    assert scheduled == [(str(soon.id), soon.expires_at)]
    with django_capture_on_commit_callbacks(execute=True):
        assert schedule_upcoming() == 0  # once per expires_at
    # A renew moves expires_at: the old schedule no longer counts.
    Mailbox.objects.filter(id=soon.id).update(expires_at=soon.expires_at + timedelta(seconds=1))
    with django_capture_on_commit_callbacks(execute=True):
        assert schedule_upcoming() == 1


def test_sweep_leaves_a_scheduled_mailbox_to_its_task_for_one_interval_then_takes_it(db, stalwart, settings):
    mailbox = make_mailbox("scheduled", stalwart=stalwart)
    row = Mailbox.objects.filter(id=mailbox.id)
    due = db_now() - timedelta(milliseconds=100)
    row.update(expires_at=due, expiry_scheduled_for=due)
    assert sweep_due_and_lapsed().expired == 0  # its own task is due to run now
    earlier(row, timedelta(seconds=settings.RELAY_SWEEP_INTERVAL_SECONDS), "expires_at", "expiry_scheduled_for")
    assert sweep_due_and_lapsed().expired == 1  # the task was lost: the sweep steps in


def test_while_tasks_are_queued_only_stalled_or_long_waiting_cleanups_are_requeued(db, stalwart, settings,
                                                                                   queue_length):
    queue_length(500)  # a backlog in the broker
    waiting = make_mailbox("waiting", due=True, stalwart=stalwart)
    stalled = make_mailbox("stalled", due=True, stalwart=stalwart)
    expire_now(waiting)
    expire_now(stalled)
    Mailbox.objects.filter(id=stalled.id).update(cleanup_state="running")  # its worker died mid-call
    both = Mailbox.objects.filter(id__in=[waiting.id, stalled.id])
    lapse = timedelta(seconds=settings.RELAY_CLEANUP_LEASE_SECONDS + 1)
    earlier(both, lapse, *CLEANUP_TIMES)
    assert sweep_due_and_lapsed().requeued == 1
    assert Mailbox.objects.get(id=stalled.id).cleanup_state == "pending"
    long_wait = timedelta(seconds=settings.RELAY_CLEANUP_LEASE_SECONDS * sweep.MAX_LEASE_DOUBLINGS + 1)
    before = Mailbox.objects.get(id=waiting.id).cleanup_lease_until
    earlier(both, long_wait - lapse, *CLEANUP_TIMES)  # on to long_wait after the start
    assert sweep_due_and_lapsed().requeued == 1
    # Past the longest lease even a queued one is presumed lost and queued again.
    assert Mailbox.objects.get(id=waiting.id).cleanup_lease_until > before
