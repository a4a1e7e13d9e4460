"""Cleanups in batches where a deprovision calls no server (the local backend): one task
takes many, settles the done ones in one statement, and keeps every guarantee of the
cleanup taken one at a time (none doubled, none early, failures each on their own)."""
from datetime import timedelta

import pytest
from celery import current_app
from django.db import connection
from django.utils import timezone

from expiry.cleanup import EXPIRE_BATCH_TASK, EXPIRE_TASK, CleanupOutcome, mailbox_cleanup, mailboxes_cleanup
from expiry.sweep import schedule_upcoming
from mailboxes.lifecycle import mailboxes_expire_due
from mailboxes.models import Mailbox
from core.clock import db_now
from tests.helpers import make_mailbox, make_mailboxes, row_held, wait_until


def test_the_local_backend_cleans_up_a_batch_in_one_task(db, settings, monkeypatch,
                                                         django_capture_on_commit_callbacks):
    settings.RELAY_BACKEND = "local"
    settings.RELAY_LOCAL_FAIL_CLEANUP_PREFIX = "fail-"
    sent = []
    monkeypatch.setattr(current_app, "send_task", lambda name, args, **kw: sent.append((name, args)))
    boxes = [make_mailbox(f"batch{i}", due=True) for i in range(5)] + [make_mailbox("fail-batch", due=True)]
    ids = [box.id for box in boxes]
    with django_capture_on_commit_callbacks(execute=True):
        mailboxes_expire_due(mailbox_ids=ids)
    assert sent == [(EXPIRE_BATCH_TASK, ([str(i) for i in ids],))], "one task for the whole batch"

    outcome = mailboxes_cleanup(mailbox_ids=ids)
    assert outcome == {"done": 5, "dead": 1}
    states = dict(Mailbox.objects.values_list("address", "cleanup_state"))
    assert states.pop("fail-batch@relay.localhost") == "dead" and set(states.values()) == {"done"}
    assert set(Mailbox.objects.values_list("cleanup_attempts", flat=True)) == {1}
    # The same batch again (a redelivered message): nothing left to take, nothing doubled.
    assert mailboxes_cleanup(mailbox_ids=ids) == {"done": 0, "dead": 0}
    assert set(Mailbox.objects.values_list("cleanup_attempts", flat=True)) == {1}


def test_a_batch_never_takes_a_mailbox_not_yet_ended(db, settings):
    settings.RELAY_BACKEND = "local"
    live = make_mailbox("still-live")
    ended = make_mailbox("ended", due=True)
    mailboxes_expire_due(mailbox_ids=[ended.id])
    assert mailboxes_cleanup(mailbox_ids=[live.id, ended.id]) == {"done": 1, "dead": 0}
    assert Mailbox.objects.get(id=live.id).cleanup_state == ""


@pytest.mark.django_db(transaction=True)
def test_a_row_another_transaction_holds_is_queued_on_its_own_and_taken(settings, monkeypatch):
    settings.RELAY_BACKEND = "local"
    sent = []
    monkeypatch.setattr(current_app, "send_task", lambda name, args, **kw: sent.append((name, args)))
    box = make_mailbox("held", due=True)
    mailboxes_expire_due(mailbox_ids=[box.id], announce=False)
    with row_held(Mailbox, box.id):  # as the API's delete of a mailbox a read has just expired does
        assert mailboxes_cleanup(mailbox_ids=[str(box.id)]) == {"done": 0, "dead": 0}
    assert sent == [(EXPIRE_TASK, (str(box.id),))], "the skipped cleanup is queued on its own"
    assert mailbox_cleanup(mailbox_id=box.id) == CleanupOutcome.DONE
    assert Mailbox.objects.get(id=box.id).cleanup_attempts == 1


def test_other_backends_keep_one_task_per_cleanup(db, stalwart, monkeypatch, django_capture_on_commit_callbacks):
    sent = []
    monkeypatch.setattr(current_app, "send_task", lambda name, args, **kw: sent.append(name))
    boxes = [make_mailbox(f"one{i}", due=True, stalwart=stalwart) for i in range(3)]
    with django_capture_on_commit_callbacks(execute=True):
        mailboxes_expire_due(mailbox_ids=[box.id for box in boxes])
    assert sent == [EXPIRE_TASK] * 3


# A batch's settle (its rows to done) waits on an advisory lock the test holds (a trigger
# of this test's database), so the worker can be killed after its claim and before its
# outcome; its connection is then ended, as a dying process's is, and nothing it did after
# the claim is kept.
HOLD_SETTLE = """
CREATE FUNCTION relay_test_hold_settle() RETURNS trigger AS $$
BEGIN PERFORM pg_advisory_xact_lock_shared(4242); RETURN NEW; END $$ LANGUAGE plpgsql;
CREATE TRIGGER relay_test_hold_settle BEFORE UPDATE ON {table} FOR EACH ROW
WHEN (NEW.cleanup_state = 'done' AND OLD.cleanup_state <> 'done') EXECUTE FUNCTION relay_test_hold_settle();
"""
FREE_SETTLE = "DROP TRIGGER IF EXISTS relay_test_hold_settle ON {table}; DROP FUNCTION IF EXISTS relay_test_hold_settle();"


def _settle_waiting() -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND wait_event = 'advisory'")
        return [pid for pid, in cursor.fetchall()]


@pytest.mark.workers
def test_a_worker_killed_inside_a_batch_loses_no_cleanup_and_takes_none_early(processes):
    processes.env["RELAY_BACKEND"] = "local"
    table = Mailbox._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(HOLD_SETTLE.format(table=table))
        cursor.execute("SELECT pg_advisory_lock(4242)")
    try:
        processes.worker("victim")
        processes.beat("beat")
        processes.wait_ready()
        mailboxes = make_mailboxes(1000, prefix="b", first_in=0.5, spread=0.5)
        ids = [m.id for m in mailboxes]
        waiting = wait_until(_settle_waiting, timeout=60, interval=0.05,
                             message="the victim to be between a batch's claim and its outcome")
        processes.kill("victim")
        with connection.cursor() as cursor:
            for pid in waiting:
                cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    finally:
        with connection.cursor() as cursor:
            cursor.execute(FREE_SETTLE.format(table=table))
            cursor.execute("SELECT pg_advisory_unlock(4242)")
    assert "expire_mailboxes" in processes.log("victim"), "the cleanups should run in batches"
    running = Mailbox.objects.filter(id__in=ids, cleanup_state="running").count()
    assert running > 0, "the killed batch should have left its claimed rows behind"

    processes.worker("survivor")
    processes.wait_ready()
    wait_until(lambda: Mailbox.objects.filter(id__in=ids, cleanup_state="done").count() == len(ids), timeout=90,
               interval=0.25, message="every cleanup to be done")
    rows = Mailbox.objects.filter(id__in=ids)
    assert not [m.address for m in rows if m.cleanup_done_at < m.expires_at], "a cleanup ran before expires_at"
    attempts = sorted(rows.values_list("cleanup_attempts", flat=True))
    # The killed batch's rows were taken once more after their lease lapsed; no row more.
    assert attempts[0] == 1 and attempts[-1] == 2 and attempts.count(2) <= running


def _record_sends(monkeypatch) -> list:
    sent = []
    monkeypatch.setattr(current_app, "send_task",
                        lambda name, args, kwargs=None, eta=None, **kw: sent.append((name, args, kwargs or {}, eta)))
    return sent


def test_mailboxes_falling_due_together_are_scheduled_as_one_batch_at_the_last_ones_instant(
        db, settings, monkeypatch, django_capture_on_commit_callbacks):
    settings.RELAY_BACKEND = "local"
    sent = _record_sends(monkeypatch)
    soon = timezone.now() + timedelta(seconds=1)
    together = [make_mailbox(f"together{i}", expires_at=soon + timedelta(milliseconds=20 * i)) for i in range(3)]
    apart = make_mailbox("apart", expires_at=soon + timedelta(milliseconds=200))
    with django_capture_on_commit_callbacks(execute=True):
        assert schedule_upcoming() == 4
    assert sent == [
        (EXPIRE_BATCH_TASK, ([str(box.id) for box in together],), {"expire_due": True}, together[-1].expires_at),
        (EXPIRE_BATCH_TASK, ([str(apart.id)],), {"expire_due": True}, apart.expires_at),
    ]


def test_a_scheduled_batch_expires_and_cleans_up_its_mailboxes_and_comes_back_for_one_not_yet_due(
        db, settings, monkeypatch):
    settings.RELAY_BACKEND = "local"
    sent = _record_sends(monkeypatch)
    soon = timezone.now() + timedelta(seconds=1)
    boxes = [make_mailbox(f"sched{i}", expires_at=soon + timedelta(milliseconds=20 * i)) for i in range(3)]
    renewed = make_mailbox("renewed", expires_at=soon)
    # The timer fires, by the database's clock, after the first two are due and a hair
    # before the last one is.
    fired = db_now()
    for box, due in zip(boxes, [fired - timedelta(milliseconds=40), fired - timedelta(milliseconds=20),
                               fired + timedelta(milliseconds=300)]):
        Mailbox.objects.filter(id=box.id).update(expires_at=due, expiry_scheduled_for=due)
    Mailbox.objects.filter(id=renewed.id).update(expiry_scheduled_for=fired - timedelta(milliseconds=40),
                                                 expires_at=fired + timedelta(minutes=10))  # renewed since
    ids = [str(box.id) for box in boxes + [renewed]]
    assert mailboxes_cleanup(mailbox_ids=ids, expire_due=True) == {"done": 2, "dead": 0}
    ran = db_now()
    rows = {box.address: box for box in Mailbox.objects.all()}
    assert [(rows[box.address].status, rows[box.address].cleanup_state) for box in boxes] == [
        ("expired", "done"), ("expired", "done"), ("active", "")]
    assert all(fired <= rows[box.address].expired_at <= ran for box in boxes[:2])
    # The early one comes back alone, not before it is due; the renewed one is left alone.
    [(name, args, kwargs, retry_at)] = sent
    assert (name, args, kwargs) == (EXPIRE_BATCH_TASK, ([str(boxes[-1].id)],), {"expire_due": True})
    assert retry_at == fired + timedelta(milliseconds=300)  # its due instant (more than EARLY_RETRY_SECONDS on)
    Mailbox.objects.filter(id=boxes[-1].id).update(expires_at=db_now(), expiry_scheduled_for=db_now())  # now due
    assert mailboxes_cleanup(mailbox_ids=[str(boxes[-1].id)], expire_due=True) == {"done": 1, "dead": 0}
    assert Mailbox.objects.get(id=renewed.id).status == "active"
    assert set(Mailbox.objects.filter(cleanup_state="done").values_list("cleanup_attempts", flat=True)) == {1}


def test_where_a_task_runs_a_batch_the_sweep_schedules_batch_after_batch(db, stalwart, settings, monkeypatch,
                                                                        django_capture_on_commit_callbacks):
    sent = _record_sends(monkeypatch)
    soon = timezone.now() + timedelta(seconds=1)
    for i in range(5):
        make_mailbox(f"many{i}", stalwart=stalwart, expires_at=soon + timedelta(milliseconds=100 * i))
    with django_capture_on_commit_callbacks(execute=True):
        assert schedule_upcoming(batch_size=2) == 2  # a task each: the workers hold a timer per mailbox
    settings.RELAY_BACKEND = "local"
    with django_capture_on_commit_callbacks(execute=True):
        assert schedule_upcoming(batch_size=2) == 3  # a timer per batch: the rest, batch after batch
    assert sorted(len(args[0]) for name, args, _, _ in sent if name == EXPIRE_BATCH_TASK) == [1, 1, 1]
