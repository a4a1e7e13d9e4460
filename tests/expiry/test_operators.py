"""What operators use: the admin, deadletters, expirystats, the retention purge, the
beat schedules installed by migration."""
import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from core.schedules import PURGE_TASK_NAME, SWEEP_TASK_NAME, WEBHOOK_SWEEP_TASK_NAME, WORDS_TASK_NAME
from expiry.purge import mailboxes_purge
from mailboxes.models import AddressReservation, Mailbox, Message, MessageContent
from tests.helpers import make_mailbox as mailbox


@pytest.fixture
def admin_client(client, db):
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def test_migration_installs_the_sweeps_the_words_backstop_and_the_daily_purge(db, settings):
    sweep = PeriodicTask.objects.get(name=SWEEP_TASK_NAME)
    assert sweep.task == "expiry.tasks.sweep" and sweep.enabled
    assert (sweep.interval.every, sweep.interval.period) == (settings.RELAY_SWEEP_INTERVAL_SECONDS, "seconds")
    purge = PeriodicTask.objects.get(name=PURGE_TASK_NAME)
    assert purge.task == "expiry.tasks.purge_retained" and purge.crontab.hour == "3"
    words = PeriodicTask.objects.get(name=WORDS_TASK_NAME)
    assert words.task == "relay.tasks.index_owed_words" and (words.interval.every, words.interval.period) == (60, "seconds")
    webhook_sweep = PeriodicTask.objects.get(name=WEBHOOK_SWEEP_TASK_NAME)
    assert webhook_sweep.task == "webhooks.tasks.sweep_deliveries" and webhook_sweep.enabled
    assert webhook_sweep.interval.every == settings.RELAY_SWEEP_INTERVAL_SECONDS


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
    page = admin_client.get("/admin/expiry/cleanup/?cleanup_state=dead")
    assert page.status_code == 200
    assert b"stuck@relay.localhost" in page.content and b"fine@relay.localhost" not in page.content
    assert b"HTTP 503 from x" in page.content
    assert b"stuck@" in admin_client.get("/admin/expiry/cleanup/?q=stuck").content
    for url in ["/admin/mailboxes/mailbox/", "/admin/accounts/account/", "/admin/accounts/apikey/", "/admin/accounts/token/",
                "/admin/mailboxes/message/", "/admin/relay/outboxmail/"]:
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


def test_the_outbox_and_the_deliveries_list_dead_letters_first_and_requeue_them(admin_client, settings):
    settings.CELERY_TASK_ALWAYS_EAGER = False  # the redelivered task is queued, not run here
    from accounts.models import Account
    from relay.models import OutboxMail
    from webhooks.models import Webhook, WebhookDelivery

    failed_mail = OutboxMail.objects.create(kind="send", to=["a@example.com"], subject="s", text="t",
                                            status="failed", attempts=4)
    sent_mail = OutboxMail.objects.create(kind="send", to=["b@example.com"], subject="s", text="t", status="sent")
    webhook = Webhook.objects.create(owner=Account.objects.create(login="hooked"), url="http://example.com/h",
                                     events=["message.received"], secret="whsec_dGVzdA==")
    failed_delivery = WebhookDelivery.objects.create(webhook=webhook, event="message.received", payload={},
                                                     message_id="msg_1", status="failed", attempts=4)
    delivered = WebhookDelivery.objects.create(webhook=webhook, event="message.received", payload={},
                                               message_id="msg_2", status="delivered")
    for url, dead, newer in [("/admin/relay/outboxmail/", failed_mail, sent_mail),
                             ("/admin/webhooks/webhookdelivery/", failed_delivery, delivered)]:
        listed = list(admin_client.get(url).context["cl"].result_list)
        assert listed == [dead, newer], url
    # Each opens under an operator's heading.
    assert "<h1>Failed mail: s to a@example.com</h1>" in admin_client.get(
        f"/admin/relay/outboxmail/{failed_mail.id}/change/").content.decode()
    assert "<h1>Failed delivery: message.received to http://example.com/h</h1>" in admin_client.get(
        f"/admin/webhooks/webhookdelivery/{failed_delivery.id}/change/").content.decode()
    assert "<h1>Mail: s to b@example.com</h1>" in admin_client.get(
        f"/admin/relay/outboxmail/{sent_mail.id}/change/").content.decode()

    response = admin_client.post("/admin/relay/outboxmail/", {"action": "requeue", "_selected_action": [failed_mail.id]})
    assert response.status_code == 302
    failed_mail.refresh_from_db()
    assert (failed_mail.status, failed_mail.attempts) == ("queued", 0)
    response = admin_client.post("/admin/webhooks/webhookdelivery/",
                                 {"action": "redeliver", "_selected_action": [failed_delivery.id]})
    assert response.status_code == 302
    failed_delivery.refresh_from_db()
    assert (failed_delivery.status, failed_delivery.attempts) == ("pending", 0)


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


def test_admin_login_guesses_from_one_ipv6_block_count_together(client, db):
    User.objects.create_superuser("root", "root@example.com", "right-password")

    def log_in(password: str, host: int):
        return client.post("/admin/login/?next=/admin/", {"username": "root", "password": password},
                           REMOTE_ADDR=f"2001:db8:7:8::{host:x}")

    assert [log_in("wrong", host).status_code for host in range(1, 5)] == [200] * 4
    assert log_in("wrong", 5).status_code == 429
    assert log_in("right-password", 6).status_code == 429


def test_the_admin_message_list_reads_no_message_bodies(admin_client, client_pro):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests.helpers import create_via_api, deliver

    address = create_via_api(client_pro, local_part="bulky").json()["address"]
    for _ in range(5):
        deliver(b"Subject: big\r\n\r\n" + b"x" * 100_000 + b"\r\n", address)
    with CaptureQueriesContext(connection) as queries:
        assert admin_client.get("/admin/mailboxes/message/").status_code == 200
    assert not [q["sql"] for q in queries.captured_queries if "messagecontent" in q["sql"]]


# --- the admin's traps -------------------------------------------------------------------
def test_api_keys_cannot_be_added_in_the_admin(admin_client):
    assert admin_client.get("/admin/accounts/apikey/add/").status_code == 403
    page = admin_client.get("/admin/mailboxes/apikey/").content
    assert b"createapikey" in page or b"Add api key" not in page


def test_a_dead_letter_opens_as_a_read_only_case_file_with_retry(admin_client):
    stuck = mailbox("stuck", status="expired", cleanup_state="dead", cleanup_attempts=4,
                    cleanup_last_error="HTTP 503 from stalwart")
    page = admin_client.get(f"/admin/expiry/cleanup/{stuck.id}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "HTTP 503 from stalwart" in html and "Retry cleanup" in html
    assert "deletelink" not in html and 'name="_save"' not in html and "Expire now" not in html
    response = admin_client.post(f"/admin/expiry/cleanup/{stuck.id}/retry/")
    assert response.status_code == 302
    stuck.refresh_from_db()
    assert (stuck.cleanup_state, stuck.cleanup_attempts) == ("pending", 0)
    assert admin_client.get(f"/admin/expiry/cleanup/{stuck.id}/retry/").status_code == 405  # a GET changes nothing


def test_the_dead_letter_list_reads_as_an_operators_console(admin_client):
    stuck = mailbox("stuck", status="expired", cleanup_state="dead", cleanup_attempts=4,
                    cleanup_last_error="HTTP 503 from stalwart")
    listing = admin_client.get("/admin/expiry/cleanup/?cleanup_state=dead")
    html = listing.content.decode()
    assert "to change" not in html and "Select cleanup" not in html
    assert "<h1>Cleanups: dead letters first, then the newest</h1>" in html
    row = html[html.index("stuck@"):html.index("</tr>", html.index("stuck@"))]
    assert ">4<" in row and "HTTP 503 from stalwart" in row  # the attempts and the error, on the list
    # From the dead letter to its mailbox and its messages.
    assert f'href="/admin/mailboxes/mailbox/{stuck.id}/change/"' in row
    messages = f"/admin/mailboxes/message/?mailbox__id__exact={stuck.id}"
    assert f'href="{messages}"' in row and admin_client.get(messages).status_code == 200
    actions = dict(listing.context["action_form"].fields["action"].choices)
    assert actions["retry_cleanup"] == "Retry cleanup of the selected dead letters"

    case = admin_client.get(f"/admin/expiry/cleanup/{stuck.id}/change/").content.decode()
    assert f"<h1>Dead letter: stuck@relay.localhost</h1>" in case and "View cleanup" not in case
    assert f'href="/admin/mailboxes/mailbox/{stuck.id}/change/">Its mailbox</a>' in case
    done = mailbox("done", status="expired", cleanup_state="done")
    assert "<h1>Cleanup: done@relay.localhost</h1>" in admin_client.get(
        f"/admin/expiry/cleanup/{done.id}/change/").content.decode()


def test_bulk_retry_requeues_every_selected_dead_letter_and_leaves_the_rest(admin_client):
    dead = [mailbox(f"dead{n}", status="expired", cleanup_state="dead", cleanup_attempts=4) for n in range(3)]
    settled = mailbox("settled", status="expired", cleanup_state="done")
    response = admin_client.post("/admin/expiry/cleanup/", {"action": "retry_cleanup", "_selected_action": [
        str(row.id) for row in [*dead, settled]]}, follow=True)
    assert "Queued cleanup again for 3 dead letter(s)" in response.content.decode()
    assert sorted(Mailbox.objects.filter(id__in=[row.id for row in dead]).values_list("cleanup_state", flat=True)) == [
        "pending"] * 3
    settled.refresh_from_db()
    assert settled.cleanup_state == "done"


def test_the_outbox_and_the_deliveries_are_titled_for_an_operator(admin_client):
    for url, title in [("/admin/relay/outboxmail/", "Outbox: failed mails first, then the newest"),
                       ("/admin/webhooks/webhookdelivery/", "Webhook deliveries: failed ones first, then the newest")]:
        html = admin_client.get(url).content.decode()
        assert f"<h1>{title}</h1>" in html and "to change" not in html


def test_dead_letters_are_listed_first_and_the_filter_offers_real_states(admin_client):
    now = timezone.now()
    mailbox("newer", status="expired", cleanup_state="done", cleanup_queued_at=now)
    mailbox("older-dead", status="expired", cleanup_state="dead", cleanup_queued_at=now - timedelta(hours=1))
    html = admin_client.get("/admin/expiry/cleanup/").content.decode()
    assert html.index("older-dead@") < html.index("newer@")
    assert "not due" not in html and "?cleanup_state=dead" in html


def test_a_mailboxs_state_cannot_be_edited_in_the_admin(admin_client):
    live = mailbox("live")
    assert admin_client.post(f"/admin/mailboxes/mailbox/{live.id}/change/",
                             {"status": "expired", "cleanup_state": "done"}).status_code == 403
    live.refresh_from_db()
    assert (live.status, live.cleanup_state) == ("active", "")
    html = admin_client.get(f"/admin/mailboxes/mailbox/{live.id}/change/").content.decode()
    assert 'name="status"' not in html and "deletelink" not in html


def test_no_admin_page_is_a_server_error(admin_client, client_pro):
    from django.contrib import admin as django_admin
    from django.test import RequestFactory

    from tests.helpers import create_via_api, deliver

    body = create_via_api(client_pro, local_part="crawl").json()
    deliver(b"Subject: s\r\n\r\nx\r\n", body["address"])
    mailbox("crawl-dead", status="expired", cleanup_state="dead")
    request = RequestFactory().get("/admin/")
    request.user = User.objects.get(username="root")
    for model, model_admin in django_admin.site._registry.items():
        base = f"/admin/{model._meta.app_label}/{model._meta.model_name}/"
        assert admin_client.get(base).status_code == 200, base
        assert admin_client.get(base + "add/").status_code in (200, 403), base
        row = model_admin.get_queryset(request).first()
        if row is not None:
            assert admin_client.get(f"{base}{row.pk}/change/").status_code == 200, base
