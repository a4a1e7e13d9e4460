"""The one owed-work rule (owed/), checked on each of the three kinds that use it: a
mailbox's cleanup, an outbox mail and a webhook delivery."""
from datetime import timedelta

import pytest
from django.utils import timezone

from mailboxes.models import CLEANUPS
from mailboxes.models import CleanupState
from relay.models import OutboxMail
from relay.outbox.send import OUTBOX
from tests.helpers import a_delivery, make_mailbox
from webhooks.delivery import DELIVERIES


def a_cleanup():
    return make_mailbox(f"owed{timezone.now().timestamp()}", cleanup_state=CleanupState.PENDING)


def a_mail():
    return OutboxMail.objects.create(kind="send", priority=2, to=["someone@example.com"], subject="s", text="t",
                                     from_email="relay@example.com")


KINDS = [pytest.param(CLEANUPS, a_cleanup, id="cleanup"), pytest.param(OUTBOX, a_mail, id="outbox"),
         pytest.param(DELIVERIES, a_delivery, id="webhook")]


def field(kind, row, name):
    row.refresh_from_db()
    return getattr(row, getattr(kind, name) if name in ("claim", "lease_until", "attempts", "last_error") else name)


@pytest.mark.parametrize("kind, make", KINDS)
def test_a_take_counts_the_attempt_and_no_second_taker_gets_the_row(db, kind, make):
    row = make()
    claim, taken = kind.take_one(row.pk)
    assert taken[kind.attempts] == 1 and field(kind, row, "attempts") == 1
    assert field(kind, row, "claim") == claim
    assert kind.take_one(row.pk) is None, "a held row was taken twice"


@pytest.mark.parametrize("kind, make", KINDS)
def test_a_lapsed_lease_hands_the_row_to_the_next_taker_and_the_first_cannot_settle(db, kind, make):
    row = make()
    first, _ = kind.take_one(row.pk)
    type(row).objects.filter(pk=row.pk).update(**{kind.lease_until: timezone.now() - timedelta(seconds=1)})
    second, taken = kind.take_one(row.pk)
    assert second != first and taken[kind.attempts] == 2
    assert kind.settle(row.pk, first, state=kind.dead, error="late") == 0, "a run that lost its lease wrote"
    assert kind.settle(row.pk, second, error="still held") == 1
    assert field(kind, row, "last_error") == "still held"


@pytest.mark.parametrize("kind, make", KINDS)
def test_a_released_row_waits_for_its_retry_then_is_taken_again(db, kind, make):
    row = make()
    claim, _ = kind.take_one(row.pk)
    assert kind.release(row.pk, claim, hold_seconds=60, error="503") == 1
    assert field(kind, row, kind.state) == kind.owed and field(kind, row, "last_error") == "503"
    assert field(kind, row, "lease_until") > timezone.now() + timedelta(seconds=50)
    _, taken = kind.take_one(row.pk)
    assert taken[kind.attempts] == 2


@pytest.mark.parametrize("kind, make", KINDS)
def test_a_dead_letter_is_requeued_with_a_fresh_count(db, settings, kind, make):
    row = make()
    for _ in range(kind.max_attempts()):
        claim, taken = kind.take_one(row.pk)
        if kind.has_retry_left(taken[kind.attempts]):
            kind.release(row.pk, claim, hold_seconds=0)
    assert not kind.has_retry_left(taken[kind.attempts])
    assert kind.dead_letter(row.pk, claim, error="gave up") == 1
    assert kind.take_one(row.pk) is None, "a dead letter was taken"
    assert kind.requeue([row.pk]) == [row.pk]
    assert field(kind, row, kind.state) == kind.owed and field(kind, row, "attempts") == 0
    assert kind.take_one(row.pk) is not None


@pytest.mark.parametrize("kind, make", KINDS)
def test_a_row_whose_last_attempt_was_lost_is_given_up(db, kind, make):
    row = make()
    type(row).objects.filter(pk=row.pk).update(**{kind.attempts: kind.max_attempts() - 1})
    kind.take_one(row.pk)  # the last attempt; its run dies
    type(row).objects.filter(pk=row.pk).update(**{kind.lease_until: timezone.now() - timedelta(seconds=1)})
    assert kind.give_up_lapsed(error="lost") == 1
    assert field(kind, row, kind.state) == kind.dead and field(kind, row, "last_error") == "lost"


def test_the_retry_delay_is_celerys_backoff_with_jitter_and_never_longer_than_the_lease_covers(settings):
    settings.RELAY_WEBHOOK_RETRY_BACKOFF_SECONDS = 10
    settings.RELAY_WEBHOOK_RETRY_BACKOFF_MAX_SECONDS = 60
    assert [DELIVERIES.longest_retry_wait(retries) for retries in range(4)] == [10, 20, 40, 60]
    delays = {DELIVERIES.retry_delay(2) for _ in range(200)}
    assert max(delays) <= 40 and len(delays) > 5, "no jitter"
    assert DELIVERIES.retry_delay(0, at_least=90) == 90


@pytest.mark.parametrize("kind, make", KINDS)
def test_a_lapsed_row_is_requeued_for_a_new_task_and_a_live_one_is_not(db, kind, make):
    lapsed, live = make(), make()
    kind.take_one(lapsed.pk)
    kind.take_one(live.pk)
    type(lapsed).objects.filter(pk=lapsed.pk).update(**{kind.lease_until: timezone.now() - timedelta(seconds=1)})
    now = timezone.now()
    assert kind.requeue_lapsed([lapsed.pk, live.pk], now) == [lapsed.pk]
    assert field(kind, lapsed, kind.state) == kind.owed and field(kind, lapsed, "lease_until") > now
    assert field(kind, live, kind.state) == kind.running and field(kind, live, "lease_until") > now, \
        "a row still leased to its run was requeued"
    assert kind.take_one(lapsed.pk) is not None, "the new task could not take the requeued row"
