"""Each case of the expire decision (SPEC §6), run in this process against the fake
Stalwart. Real worker processes are in test_workers.py."""
import threading
from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.utils import timezone

from expiry import services
from expiry.tasks import expire_mailbox
from mailboxes.models import Mailbox
from tests.stalwart_fake import CONCURRENCY, FORBIDDEN_IN_BODY, HTTP_503, NOT_FOUND, RATE_LIMITED, TIMEOUT, UNAUTHORIZED


@pytest.fixture
def make_mailbox(db, stalwart):
    def make(name: str, *, due: bool = True, account: bool = True) -> Mailbox:
        now = timezone.now()
        return Mailbox.objects.create(
            address=f"{name}@relay.localhost",
            expires_at=now - timedelta(seconds=1) if due else now + timedelta(minutes=10),
            backend_id=stalwart.add_account(name) if account else "",
        )

    return make


def expire(mailbox: Mailbox) -> None:
    """What the sweep does for a due mailbox, without publishing anything."""
    assert services.mailboxes_expire(mailbox_ids=[mailbox.id], enqueue=False) == [mailbox.id]


def run_task(mailbox: Mailbox) -> str:
    """The real task, run eagerly: Celery's autoretry re-applies it at once."""
    return expire_mailbox.apply(args=(str(mailbox.id),)).result


def test_not_yet_due_does_nothing(make_mailbox, stalwart):
    mailbox = make_mailbox("later", due=False)
    assert run_task(mailbox) == "skipped"
    mailbox.refresh_from_db()
    assert (mailbox.status, mailbox.cleanup_state) == ("active", "")
    assert stalwart.calls == []


def test_due_is_deprovisioned_and_done(make_mailbox, stalwart):
    mailbox = make_mailbox("due")
    assert (expire(mailbox), run_task(mailbox))[1] == "done"
    mailbox.refresh_from_db()
    assert (mailbox.status, mailbox.cleanup_state, mailbox.cleanup_attempts) == ("expired", "done", 1)
    assert mailbox.cleanup_done_at >= mailbox.expires_at
    assert stalwart.destroyed_names() == ["due"]


def test_a_task_queued_before_due_expires_the_mailbox_itself_once_due(make_mailbox, stalwart):
    mailbox = make_mailbox("early", due=False)
    with time_machine.travel(mailbox.expires_at + timedelta(milliseconds=1), tick=False):
        assert run_task(mailbox) == "done"
    mailbox.refresh_from_db()
    assert (mailbox.status, mailbox.cleanup_state) == ("expired", "done")


@pytest.mark.parametrize("how", ["no account", "notFound"])
def test_already_gone_counts_as_done(make_mailbox, stalwart, how):
    mailbox = make_mailbox("gone", account=how != "no account")
    if how == "notFound":
        stalwart.fail(NOT_FOUND, name="gone")
    assert (expire(mailbox), run_task(mailbox))[1] == "done"
    mailbox.refresh_from_db()
    assert mailbox.cleanup_state == "done"
    assert stalwart.destroyed_names() == []


@pytest.mark.parametrize("kind", [HTTP_503, RATE_LIMITED, CONCURRENCY, TIMEOUT])
def test_transient_failure_is_retried_then_done(make_mailbox, stalwart, kind):
    mailbox = make_mailbox("flaky")
    stalwart.fail(kind, name="flaky", times=2)
    assert (expire(mailbox), run_task(mailbox))[1] == "done"
    mailbox.refresh_from_db()
    assert (mailbox.cleanup_state, mailbox.cleanup_attempts) == ("done", 3)
    assert len(stalwart.destroy_calls("flaky")) == 3
    assert stalwart.destroyed_names() == ["flaky"]


def test_failing_past_the_last_retry_is_dead_with_attempts_and_error(make_mailbox, stalwart):
    mailbox = make_mailbox("broken")
    stalwart.fail(HTTP_503, name="broken")
    assert (expire(mailbox), run_task(mailbox))[1] == "dead"
    mailbox.refresh_from_db()
    assert (mailbox.cleanup_state, mailbox.cleanup_attempts) == ("dead", 4)  # 1 try + max_retries 3
    assert "503" in mailbox.cleanup_last_error
    assert mailbox.cleanup_lease_until is None  # no sweep will pick it up again by itself
    assert len(stalwart.destroy_calls("broken")) == 4


@pytest.mark.parametrize("kind", [UNAUTHORIZED, FORBIDDEN_IN_BODY])
def test_permanent_error_is_dead_at_once(make_mailbox, stalwart, kind):
    mailbox = make_mailbox("refused")
    stalwart.fail(kind, name="refused")
    assert (expire(mailbox), run_task(mailbox))[1] == "dead"
    mailbox.refresh_from_db()
    assert (mailbox.cleanup_state, mailbox.cleanup_attempts) == ("dead", 1)
    assert mailbox.cleanup_last_error


def test_already_done_makes_no_backend_call(make_mailbox, stalwart):
    mailbox = make_mailbox("twice")
    expire(mailbox)
    assert run_task(mailbox) == "done"
    calls = len(stalwart.calls)
    assert run_task(mailbox) == "skipped"  # a duplicate of the same message
    assert len(stalwart.calls) == calls


def test_a_running_cleanup_is_not_taken_by_a_second_task(make_mailbox, stalwart):
    mailbox = make_mailbox("held")
    expire(mailbox)
    Mailbox.objects.filter(id=mailbox.id).update(cleanup_state="running")
    assert run_task(mailbox) == "skipped"
    assert stalwart.calls == []


def test_sweep_with_nothing_due_makes_no_backend_call(make_mailbox, stalwart):
    make_mailbox("future", due=False)
    result = services.cleanup_sweep()
    assert (result.expired, result.requeued) == (0, 0)
    assert stalwart.calls == []
    assert Mailbox.objects.get().status == "active"


def test_sweep_requeues_a_cleanup_whose_lease_lapsed_keeping_its_attempts(make_mailbox, stalwart):
    mailbox = make_mailbox("lapsed")
    expire(mailbox)
    Mailbox.objects.filter(id=mailbox.id).update(cleanup_state="running", cleanup_attempts=2)
    assert services.cleanup_sweep().requeued == 0  # lease still running
    with time_machine.travel(timezone.now() + timedelta(minutes=5), tick=False):
        assert services.cleanup_sweep().requeued == 1
    mailbox.refresh_from_db()
    assert (mailbox.cleanup_state, mailbox.cleanup_attempts) == ("pending", 2)


def test_a_cleanup_that_keeps_dying_becomes_dead(make_mailbox, stalwart):
    mailbox = make_mailbox("poison")
    expire(mailbox)
    Mailbox.objects.filter(id=mailbox.id).update(cleanup_attempts=4)  # four attempts died mid-call
    assert run_task(mailbox) == "dead"
    mailbox.refresh_from_db()
    assert mailbox.cleanup_state == "dead"
    assert stalwart.calls == []


@pytest.mark.django_db(transaction=True)
def test_two_sweeps_at_once_claim_disjoint_mailboxes(stalwart, monkeypatch):
    now = timezone.now()
    Mailbox.objects.bulk_create([Mailbox(address=f"m{i}@relay.localhost", expires_at=now - timedelta(seconds=1))
                                 for i in range(3000)])
    claimed: list[list] = [[], []]

    def record(mailbox_ids):
        claimed[int(threading.current_thread().name)].extend(mailbox_ids)

    monkeypatch.setattr(services, "_enqueue_after_commit", record)
    barrier = threading.Barrier(2)

    def sweep():
        barrier.wait()
        try:
            services.cleanup_sweep(batch_size=50)
        finally:
            connection.close()

    threads = [threading.Thread(target=sweep, name=str(i)) for i in range(2)]
    [t.start() for t in threads]
    [t.join(120) for t in threads]
    assert claimed[0] and claimed[1], "both sweeps should have found work"
    assert not set(claimed[0]) & set(claimed[1])
    assert len(claimed[0]) + len(claimed[1]) == 3000
    assert Mailbox.objects.filter(status="expired", cleanup_state="pending").count() == 3000


@pytest.mark.django_db(transaction=True)
def test_two_workers_running_one_cleanup_deprovision_once(stalwart):
    stalwart.latency = 0.3
    mailbox = Mailbox.objects.create(address="contended@relay.localhost", expires_at=timezone.now(),
                                     backend_id=stalwart.add_account("contended"))
    expire(mailbox)
    barrier = threading.Barrier(2)
    outcomes = []

    def work():
        barrier.wait()
        try:
            outcomes.append(services.mailbox_cleanup(mailbox_id=mailbox.id, final_attempt=False,
                                                     retry_wait_max_seconds=1))
        finally:
            connection.close()

    threads = [threading.Thread(target=work) for _ in range(2)]
    [t.start() for t in threads]
    [t.join(30) for t in threads]
    assert sorted(outcomes) == ["done", "skipped"]
    assert len(stalwart.destroy_calls("contended")) == 1


def test_a_pending_cleanup_requeued_again_and_again_waits_twice_as_long_each_time(make_mailbox, stalwart, settings,
                                                                                 monkeypatch):
    monkeypatch.setattr(services, "_queued_expire_tasks", lambda: 0)  # the queue is drained: the task is lost
    mailbox = make_mailbox("backlogged")
    expire(mailbox)
    lease = timedelta(seconds=settings.RELAY_CLEANUP_LEASE_SECONDS)
    start = Mailbox.objects.get(id=mailbox.id).cleanup_queued_at
    at, waits = start, []
    for _ in range(4):
        at = Mailbox.objects.get(id=mailbox.id).cleanup_lease_until
        with time_machine.travel(at, tick=False):
            assert services.cleanup_sweep().requeued == 1
        waits.append(Mailbox.objects.get(id=mailbox.id).cleanup_lease_until - at)
    assert waits == [lease, 2 * lease, 4 * lease, 8 * lease]
    assert Mailbox.objects.get(id=mailbox.id).cleanup_attempts == 0  # waiting is not an attempt


def test_sweep_schedules_mailboxes_falling_due_before_the_next_sweeps_once(make_mailbox, stalwart, settings,
                                                                           monkeypatch, django_capture_on_commit_callbacks):
    scheduled = []
    monkeypatch.setattr(expire_mailbox, "apply_async", lambda args, eta=None, **kw: scheduled.append((args[0], eta)))
    now = timezone.now()
    soon = Mailbox.objects.create(address="soon@relay.localhost", expires_at=now + timedelta(seconds=1),
                                  backend_id=stalwart.add_account("soon"))
    make_mailbox("later", due=False)  # ten minutes away: not yet
    with django_capture_on_commit_callbacks(execute=True):
        assert services.cleanup_sweep().scheduled == 1
    assert scheduled == [(str(soon.id), soon.expires_at)]
    with django_capture_on_commit_callbacks(execute=True):
        assert services.cleanup_sweep().scheduled == 0  # once per expires_at
    # A renew moves expires_at: the old schedule no longer counts.
    Mailbox.objects.filter(id=soon.id).update(expires_at=now + timedelta(seconds=2))
    with django_capture_on_commit_callbacks(execute=True):
        assert services.cleanup_sweep().scheduled == 1


def test_a_scheduled_task_expires_and_cleans_up_its_mailbox_at_the_due_instant(make_mailbox, stalwart):
    mailbox = make_mailbox("ontime", due=False)
    Mailbox.objects.filter(id=mailbox.id).update(expiry_scheduled_for=mailbox.expires_at)
    with time_machine.travel(mailbox.expires_at - timedelta(milliseconds=5), tick=False):
        assert run_task(mailbox) == "early"  # the timer fired a hair early: it comes back
    with time_machine.travel(mailbox.expires_at, tick=False):
        assert run_task(mailbox) == "done"
    mailbox.refresh_from_db()
    assert (mailbox.status, mailbox.cleanup_state, mailbox.expired_at) == ("expired", "done", mailbox.expires_at)


def test_sweep_leaves_a_scheduled_mailbox_to_its_task_for_one_interval_then_takes_it(make_mailbox, stalwart, settings):
    mailbox = make_mailbox("scheduled", due=False)
    Mailbox.objects.filter(id=mailbox.id).update(expiry_scheduled_for=mailbox.expires_at)
    with time_machine.travel(mailbox.expires_at + timedelta(milliseconds=100), tick=False):
        assert services.cleanup_sweep().expired == 0  # its own task is due to run now
    late = mailbox.expires_at + timedelta(seconds=settings.RELAY_SWEEP_INTERVAL_SECONDS, milliseconds=1)
    with time_machine.travel(late, tick=False):
        assert services.cleanup_sweep().expired == 1  # the task was lost: the sweep steps in


def test_while_tasks_are_queued_only_stalled_or_long_waiting_cleanups_are_requeued(make_mailbox, stalwart, settings,
                                                                                   monkeypatch):
    monkeypatch.setattr(services, "_queued_expire_tasks", lambda: 500)  # a backlog in the broker
    waiting, stalled = make_mailbox("waiting"), make_mailbox("stalled")
    expire(waiting)
    expire(stalled)
    Mailbox.objects.filter(id=stalled.id).update(cleanup_state="running")  # its worker died mid-call
    lapse = timedelta(seconds=settings.RELAY_CLEANUP_LEASE_SECONDS + 1)
    with time_machine.travel(timezone.now() + lapse, tick=False):
        assert services.cleanup_sweep().requeued == 1
    assert Mailbox.objects.get(id=stalled.id).cleanup_state == "pending"
    long_wait = timedelta(seconds=settings.RELAY_CLEANUP_LEASE_SECONDS * services.MAX_LEASE_DOUBLINGS + 1)
    before = Mailbox.objects.get(id=waiting.id).cleanup_lease_until
    with time_machine.travel(timezone.now() + long_wait, tick=False):
        assert services.cleanup_sweep().requeued == 1
    # Past the longest lease even a queued one is presumed lost and queued again.
    assert Mailbox.objects.get(id=waiting.id).cleanup_lease_until > before
