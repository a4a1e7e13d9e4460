"""Cleanups in batches where a deprovision calls no server (the local backend): one task
takes many, settles the done ones in one statement, and keeps every guarantee of the
cleanup taken one at a time (none doubled, none early, failures each on their own)."""
from celery import current_app

from expiry.cleanup import mailboxes_cleanup
from mailboxes.ending import EXPIRE_BATCH_TASK, EXPIRE_TASK, mailboxes_expire_due
from mailboxes.models import Mailbox
from tests.helpers import make_mailbox


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


def test_other_backends_keep_one_task_per_cleanup(db, stalwart, monkeypatch, django_capture_on_commit_callbacks):
    sent = []
    monkeypatch.setattr(current_app, "send_task", lambda name, args, **kw: sent.append(name))
    boxes = [make_mailbox(f"one{i}", due=True, stalwart=stalwart) for i in range(3)]
    with django_capture_on_commit_callbacks(execute=True):
        mailboxes_expire_due(mailbox_ids=[box.id for box in boxes])
    assert sent == [EXPIRE_TASK] * 3
