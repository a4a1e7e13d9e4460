"""What operators use: the admin, deadletters, expirystats, the retention purge, the
beat schedules installed by migration."""
import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from expiry.schedules import PURGE_TASK_NAME, SWEEP_TASK_NAME
from expiry.purge import mailboxes_purge
from mailboxes.models import AddressReservation, Mailbox, Message, MessageContent
from tests.helpers import make_mailbox as mailbox


@pytest.fixture
def admin_client(client, db):
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def test_migration_installs_the_sweep_and_the_daily_purge(db, settings):
    sweep = PeriodicTask.objects.get(name=SWEEP_TASK_NAME)
    assert sweep.task == "expiry.tasks.sweep" and sweep.enabled
    assert (sweep.interval.every, sweep.interval.period) == (settings.RELAY_SWEEP_INTERVAL_SECONDS, "seconds")
    purge = PeriodicTask.objects.get(name=PURGE_TASK_NAME)
    assert purge.task == "expiry.tasks.purge_retained" and purge.crontab.hour == "3"


def test_expirystats_json_has_exactly_the_spec_shape(db, capsys):
    mailbox("a")
    mailbox("b", status="expired", cleanup_state="pending")
    mailbox("c", status="expired", cleanup_state="running")
    mailbox("d", status="deleted", cleanup_state="done")
    mailbox("e", status="expired", cleanup_state="dead")
    call_command("expirystats", "--json")
    assert json.loads(capsys.readouterr().out) == {
        "mailboxes": {"active": 1, "expired": 3, "deleted": 1},
        "cleanup": {"pending": 2, "done": 1, "dead": 1},
    }


def test_deadletters_lists_and_requeues(db, capsys):
    dead = mailbox("dead1", status="expired", cleanup_state="dead", cleanup_attempts=4, cleanup_last_error="HTTP 503")
    mailbox("fine", status="expired", cleanup_state="done")
    call_command("deadletters")
    out = capsys.readouterr().out
    assert "dead1@relay.localhost" in out and "HTTP 503" in out and "fine@" not in out
    call_command("deadletters", "--requeue")
    assert "requeued 1" in capsys.readouterr().out
    dead.refresh_from_db()
    assert (dead.cleanup_state, dead.cleanup_attempts) == ("pending", 0)
    assert dead.cleanup_lease_until > timezone.now()


def test_admin_lists_dead_letters_with_filter_and_search(admin_client):
    mailbox("stuck", status="expired", cleanup_state="dead", cleanup_attempts=4, cleanup_last_error="HTTP 503 from x")
    mailbox("fine", status="expired", cleanup_state="done")
    page = admin_client.get("/admin/expiry/cleanup/?cleanup_state__exact=dead")
    assert page.status_code == 200
    assert b"stuck@relay.localhost" in page.content and b"fine@relay.localhost" not in page.content
    assert b"HTTP 503 from x" in page.content
    assert b"stuck@" in admin_client.get("/admin/expiry/cleanup/?q=stuck").content
    for url in ["/admin/mailboxes/mailbox/", "/admin/mailboxes/owner/", "/admin/mailboxes/apikey/",
                "/admin/mailboxes/message/", "/admin/mailboxes/outboundmessage/"]:
        assert admin_client.get(url).status_code == 200


def test_admin_action_retry_cleanup_requeues_dead_letters(admin_client):
    stuck = mailbox("stuck", status="expired", cleanup_state="dead", cleanup_attempts=4)
    response = admin_client.post("/admin/expiry/cleanup/", {"action": "retry_cleanup", "_selected_action": [stuck.id]})
    assert response.status_code == 302
    stuck.refresh_from_db()
    assert (stuck.cleanup_state, stuck.cleanup_attempts) == ("pending", 0)


def test_admin_action_expire_now_expires_an_active_mailbox(admin_client):
    live = mailbox("live")
    response = admin_client.post("/admin/mailboxes/mailbox/", {"action": "expire_now", "_selected_action": [live.id]})
    assert response.status_code == 302, response.content[:3000]
    live.refresh_from_db()
    assert (live.status, live.cleanup_state) == ("expired", "pending")
    assert live.expires_at <= timezone.now()


def test_purge_removes_settled_mailboxes_past_retention_but_keeps_addresses(db, settings):
    now = timezone.now()
    old_done = mailbox("old", status="expired", expired_at=now - timedelta(days=8), cleanup_state="done")
    content = MessageContent.objects.create(raw=b"x")
    Message.objects.create(mailbox=old_done, content=content, size=1)
    old_deleted = mailbox("olddel", status="deleted", deleted_at=now - timedelta(days=8), cleanup_state="done")
    old_dead = mailbox("olddead", status="expired", expired_at=now - timedelta(days=8), cleanup_state="dead")
    recent = mailbox("recent", status="expired", expired_at=now - timedelta(days=6), cleanup_state="done")
    active = mailbox("active")
    assert mailboxes_purge(batch_size=1) == 2
    remaining = set(Mailbox.objects.values_list("address", flat=True))
    assert remaining == {old_dead.address, recent.address, active.address}
    assert not Message.objects.exists()
    assert AddressReservation.objects.filter(address__in=[old_done.address, old_deleted.address]).count() == 2


def test_admin_login_is_locked_out_after_five_failures(client, db):
    User.objects.create_superuser("root", "root@example.com", "right-password")

    def log_in(password: str):
        return client.post("/admin/login/?next=/admin/", {"username": "root", "password": password},
                           REMOTE_ADDR="198.51.100.9")

    assert [log_in("wrong").status_code for _ in range(4)] == [200] * 4  # the form again, with an error
    assert log_in("wrong").status_code == 429
    assert log_in("right-password").status_code == 429  # locked out, even with the right one
