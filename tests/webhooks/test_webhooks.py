"""Webhooks (docs/api.md) against a real local HTTP receiver and real worker processes:
signatures, retries with one webhook-id, dead letters, 410, SSRF refusal, and a broker
flushed between the event and its delivery."""
import base64
import hashlib
import hmac
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.utils import timezone

from expiry.cleanup import _record_dead
from mailboxes.lifecycle import mailbox_delete, mailboxes_force_expire
from mailboxes.models import CleanupState, Mailbox
from tests import mail_corpus
from tests.helpers import create_via_api, deliver, row_held, wait_until
from webhooks.delivery import deliveries_redeliver
from webhooks.models import Webhook, WebhookDelivery
from webhooks.tasks import deliver_webhook, publish_quietly


def verify_standard_webhook(secret: str, headers: dict, body: bytes, tolerance: int = 300) -> bool:
    """A Standard Webhooks verifier, from the spec's words: the key is the base64 after
    `whsec_`; the signed content is `{webhook-id}.{webhook-timestamp}.{body}`; the
    signature header is space-separated `v1,<base64 HMAC-SHA256>` entries, any of which
    may match; the timestamp must be recent."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    if abs(time.time() - int(headers["webhook-timestamp"])) > tolerance:
        return False
    content = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    expected = base64.b64encode(hmac.new(key, content, hashlib.sha256).digest()).decode()
    return any(hmac.compare_digest(entry.split(",", 1)[1], expected)
               for entry in headers["webhook-signature"].split() if entry.startswith("v1,"))


class Receiver:
    """A local HTTP server that records each POST and answers with the next scripted status."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict, bytes]] = []
        self.answers: list[int] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
                status = receiver.answers.pop(0) if receiver.answers else 200
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()


@pytest.fixture
def receiver():
    server = Receiver()
    yield server
    server.stop()


@pytest.fixture
def allow_private(settings):
    settings.RELAY_WEBHOOK_ALLOW_PRIVATE = True


def subscribe(client, url: str, events=("message.received",), **extra) -> dict:
    response = client.post("/api/v1/webhooks", {"url": url, "events": list(events), **extra}, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


@pytest.fixture
def hooked(processes, receiver, client_pro, allow_private):
    """A mailbox whose owner subscribed the receiver to message.received, and a worker."""
    processes.env["RELAY_WEBHOOK_ALLOW_PRIVATE"] = "true"
    hook = subscribe(client_pro, receiver.url)
    box = create_via_api(client_pro, local_part=f"hooked{uuid.uuid4().hex[:6]}").json()
    return processes, hook, box


# --- routes --------------------------------------------------------------------------------
def test_a_webhook_is_created_with_its_secret_once_and_listed_without_it(client_pro, allow_private):
    hook = subscribe(client_pro, "http://127.0.0.1:9/hook", events=["message.received", "cleanup.dead"])
    assert hook["secret"].startswith("whsec_") and hook["events"] == ["cleanup.dead", "message.received"]
    listed = client_pro.get("/api/v1/webhooks").json()["results"]
    assert [item["id"] for item in listed] == [hook["id"]] and "secret" not in listed[0]
    assert client_pro.delete(f"/api/v1/webhooks/{hook['id']}").status_code == 204
    assert client_pro.get(f"/api/v1/webhooks/{hook['id']}/deliveries").status_code == 404


@pytest.mark.parametrize("url", ["http://127.0.0.1/hook", "http://10.1.2.3/hook", "http://169.254.169.254/latest",
                                 "http://[::1]/hook", "http://localhost:8000/x", "ftp://example.com/x"])
def test_private_and_non_http_urls_are_refused(client_pro, url):
    response = client_pro.post("/api/v1/webhooks", {"url": url, "events": ["message.received"]}, format="json")
    assert response.status_code == 400 and "url" in response.json()["fields"]


def test_unknown_events_are_400(client_pro, allow_private):
    response = client_pro.post("/api/v1/webhooks", {"url": "http://127.0.0.1:9/", "events": ["mail.sent"]},
                               format="json")
    assert response.status_code == 400 and "events" in response.json()["fields"]


# --- events are rows, written with what caused them ----------------------------------------------
def test_expiry_deletion_and_dead_cleanups_are_recorded_as_deliveries(client_pro, allow_private):
    subscribe(client_pro, "http://127.0.0.1:9/hook", events=["mailbox.expired", "mailbox.deleted", "cleanup.dead"])
    first = create_via_api(client_pro).json()
    second = create_via_api(client_pro).json()
    mailboxes_force_expire(mailbox_ids=[first["id"]])
    mailbox_delete(mailbox=Mailbox.objects.get(id=second["id"]))
    claim = uuid.uuid4()
    Mailbox.objects.filter(id=first["id"]).update(cleanup_state=CleanupState.RUNNING, cleanup_claim=claim,
                                                  cleanup_attempts=4, cleanup_last_error="HTTP 503")
    _record_dead(first["id"], claim, "HTTP 503 four times")
    events = {(d.event, d.payload["data"]["mailbox"]["id"]) for d in WebhookDelivery.objects.all()}
    assert events == {("mailbox.expired", first["id"]), ("mailbox.deleted", second["id"]),
                      ("cleanup.dead", first["id"])}
    dead = WebhookDelivery.objects.get(event="cleanup.dead").payload
    assert dead["type"] == "cleanup.dead" and dead["data"]["last_error"] == "HTTP 503 four times"


def test_another_owners_mail_makes_no_delivery(client_pro, make_client, allow_private):
    subscribe(client_pro, "http://127.0.0.1:9/hook")
    other = make_client("bob", "pro")
    box = create_via_api(other).json()
    deliver(mail_corpus.plain(box["address"]), box["address"])
    assert not WebhookDelivery.objects.exists()


# --- delivery, with real workers -------------------------------------------------------------------------
@pytest.mark.workers
def test_a_message_is_delivered_signed_as_standard_webhooks_do(hooked, receiver):
    processes, hook, box = hooked
    processes.worker("worker")
    processes.wait_ready()
    message_id, = deliver(mail_corpus.plain(box["address"]), box["address"])
    wait_until(lambda: receiver.requests, timeout=30, message="the delivery")
    headers, body = receiver.requests[0]
    assert verify_standard_webhook(hook["secret"], headers, body)
    assert not verify_standard_webhook(hook["secret"], headers, body + b" ")
    payload = json.loads(body)
    assert payload["type"] == "message.received" and payload["data"]["id"] == message_id
    assert payload["data"]["mailbox_id"] == box["id"]
    wait_until(lambda: WebhookDelivery.objects.filter(status="delivered").exists(), timeout=10, message="delivered")


@pytest.mark.workers
def test_500_500_200_is_one_delivery_three_attempts_one_webhook_id(hooked, receiver, client_pro):
    processes, hook, box = hooked
    receiver.answers = [500, 500, 200]
    processes.worker("worker")
    processes.wait_ready()
    deliver(mail_corpus.plain(box["address"]), box["address"])
    wait_until(lambda: WebhookDelivery.objects.filter(status="delivered").exists(), timeout=60,
               message="delivered on the third attempt")
    assert len(receiver.requests) == 3
    assert len({headers["webhook-id"] for headers, _ in receiver.requests}) == 1
    listed = client_pro.get(f"/api/v1/webhooks/{hook['id']}/deliveries").json()["results"]
    assert [(d["status"], d["attempts"], d["last_status_code"]) for d in listed] == [("delivered", 3, 200)]


@pytest.mark.workers
def test_a_400_fails_at_once_and_can_be_redelivered(hooked, receiver):
    processes, hook, box = hooked
    receiver.answers = [400]
    processes.worker("worker")
    processes.wait_ready()
    deliver(mail_corpus.plain(box["address"]), box["address"])
    wait_until(lambda: WebhookDelivery.objects.filter(status="failed").exists(), timeout=30, message="failed")
    delivery = WebhookDelivery.objects.get()
    assert (delivery.attempts, delivery.last_status_code) == (1, 400) and len(receiver.requests) == 1
    publish_quietly(deliver_webhook, deliveries_redeliver(delivery_ids=[delivery.id]))
    wait_until(lambda: WebhookDelivery.objects.filter(status="delivered").exists(), timeout=30, message="redelivered")


@pytest.mark.workers
def test_a_410_disables_the_webhook(hooked, receiver):
    processes, hook, box = hooked
    receiver.answers = [410]
    processes.worker("worker")
    processes.wait_ready()
    deliver(mail_corpus.plain(box["address"]), box["address"])
    wait_until(lambda: Webhook.objects.filter(id=hook["id"], disabled_at__isnull=False).exists(), timeout=30,
               message="the webhook disabled")
    deliver(mail_corpus.plain(box["address"]), box["address"])
    assert WebhookDelivery.objects.count() == 1 and WebhookDelivery.objects.get().status == "failed"


@pytest.mark.django_db(transaction=True)
def test_a_delivery_another_transaction_holds_when_its_batch_takes_is_queued_on_its_own(
        receiver, allow_private, client_pro, monkeypatch):
    from celery import current_app

    from webhooks import delivery as webhook_delivery
    from webhooks import tasks as webhook_tasks

    subscribe(client_pro, receiver.url, events=["mailbox.expired"])
    boxes = [create_via_api(client_pro, local_part=f"heldhook{i}").json() for i in range(2)]
    batches, sent = [], []
    monkeypatch.setattr(webhook_tasks.deliver_webhooks, "delay", lambda ids: batches.append(ids))
    monkeypatch.setattr(current_app, "send_task", lambda name, args, **kw: sent.append((name, args)))
    mailboxes_force_expire(mailbox_ids=[box["id"] for box in boxes])  # commits: the batch is queued
    (batch,) = batches
    with row_held(WebhookDelivery, batch[0]):  # as an operator's redeliver does for a moment
        assert webhook_delivery.deliver_many(delivery_ids=batch) == {"delivered": 1, "failed": 0, "retrying": 0}
    assert [task for task in sent if task[0].startswith("webhooks.")] == [(webhook_delivery.DELIVER_TASK, (batch[0],))]
    assert webhook_delivery.deliver(delivery_id=batch[0]) == "delivered"
    assert len(receiver.requests) == 2 and set(WebhookDelivery.objects.values_list("status", flat=True)) == {"delivered"}


@pytest.mark.workers
def test_a_broker_flushed_between_event_and_delivery_still_delivers(hooked, receiver, broker):
    processes, hook, box = hooked
    processes.env["RELAY_WEBHOOK_LEASE_SECONDS"] = "3"
    deliver(mail_corpus.plain(box["address"]), box["address"])
    assert WebhookDelivery.objects.get().status == "pending"
    broker.flushdb()  # the task is gone; the row is not
    WebhookDelivery.objects.update(lease_until=timezone.now())  # as if its lease had run out meanwhile
    processes.worker("worker")
    processes.beat("beat")
    processes.wait_ready()
    wait_until(lambda: WebhookDelivery.objects.filter(status="delivered").exists(), timeout=60,
               message="the delivery, queued again by the sweep")
    assert len(receiver.requests) == 1


def test_deliveries_to_one_receiver_go_in_one_batch_task_and_a_failure_retries_alone(
        db, receiver, allow_private, client_pro, monkeypatch, django_capture_on_commit_callbacks):
    from celery import current_app

    from webhooks import delivery as webhook_delivery
    from webhooks import tasks as webhook_tasks

    created = client_pro.post("/api/v1/webhooks", {"url": receiver.url, "events": ["mailbox.expired"]}, format="json")
    assert created.status_code == 201, created.content
    secret = created.json()["secret"]
    boxes = [create_via_api(client_pro, local_part=f"batched{i}").json() for i in range(4)]
    batches, retried = [], []
    monkeypatch.setattr(webhook_tasks.deliver_webhooks, "delay", lambda ids: batches.append(ids))
    monkeypatch.setattr(current_app, "send_task", lambda name, args, **kw: retried.append((name, args)))
    with django_capture_on_commit_callbacks(execute=True):
        mailboxes_force_expire(mailbox_ids=[box["id"] for box in boxes])  # one event, four deliveries
    assert len(batches) == 1 and len(batches[0]) == 4, "one task for the four deliveries to one receiver"

    receiver.answers = [200, 503, 204, 200]
    assert webhook_delivery.deliver_many(delivery_ids=batches[0]) == {"delivered": 3, "failed": 0, "retrying": 1}
    assert len(receiver.requests) == 4
    assert all(verify_standard_webhook(secret, headers, body) for headers, body in receiver.requests)
    rows = {row.id: row for row in WebhookDelivery.objects.all()}
    failed_once = batches[0][1]
    assert [sent for sent in retried if sent[0].startswith("webhooks.")] == [
        (webhook_delivery.DELIVER_TASK, (failed_once,))], "the 503 comes back as its own task"
    assert rows[failed_once].status == "pending" and rows[failed_once].last_status_code == 503
    assert sorted(row.last_status_code for i, row in rows.items() if i != failed_once) == [200, 200, 204]
    assert {row.status for i, row in rows.items() if i != failed_once} == {"delivered"}
    # The same batch again (a redelivered message): no delivered one is sent twice (the
    # one given back for its retry may be tried at once, as by any task that finds it).
    webhook_delivery.deliver_many(delivery_ids=batches[0])
    sent = [headers["webhook-id"] for headers, _ in receiver.requests]
    delivered_ids = {row.message_id for i, row in rows.items() if i != failed_once}
    assert sorted(i for i in sent if i in delivered_ids) == sorted(delivered_ids)
