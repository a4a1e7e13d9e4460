"""What a hostile webhook owner or receiver could do, tried against real local HTTP servers
(SECURITY.md, "Webhooks"): a name that resolves elsewhere on the second look, a receiver
that answers one byte at a time or breaks its answer, internal answers copied back to
the owner, NAT64 addresses, an account with a hundred webhooks."""
import ipaddress
import socket
import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.utils import timezone

from core import http as core_http
from core.http import PrivateAddress, check_url
from tests.drip_server import LoopbackServer
from tests.helpers import a_delivery
from webhooks.delivery import RetryableDelivery, deliver, lapsed_requeue
from webhooks.models import DeliveryStatus, WebhookDelivery

SECRET_BODY = b"internal-service-secret-0123456789"


class Answering(ThreadingHTTPServer):
    """A receiver on `host` that answers every POST with `status` and a body."""

    def __init__(self, host: str, port: int, status: int = 200) -> None:
        self.hits = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                server.hits += 1
                self.send_response(status)
                self.send_header("Content-Length", str(len(SECRET_BODY)))
                self.end_headers()
                self.wfile.write(SECRET_BODY)

            def log_message(self, *args):
                pass

        super().__init__((host, port), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


class RawServer(LoopbackServer):
    """A TCP receiver that reads the request, then runs `answer(connection)`."""

    def __init__(self, answer) -> None:
        self.answer = answer
        super().__init__()

    def accepted(self, connection) -> None:
        threading.Thread(target=self._handle, args=(connection,), daemon=True).start()

    def _handle(self, connection) -> None:
        try:
            connection.recv(65536)
            self.answer(connection, self.stopped)
        except OSError:
            pass
        finally:
            connection.close()


def test_a_name_that_resolves_elsewhere_on_the_second_look_is_still_sent_where_it_was_checked(
        db, settings, monkeypatch):
    """DNS rebinding: the first answer is the checked address, the next one an internal
    service. The connection must go to the first, and the internal one hear nothing."""
    settings.RELAY_WEBHOOK_ALLOW_PRIVATE = True  # both are loopback here; the pinning is under test
    checked = Answering("127.0.0.1", 0)
    internal = Answering("127.0.0.2", checked.server_port, status=500)
    answers = iter(["127.0.0.1", "127.0.0.2", "127.0.0.2", "127.0.0.2"])
    real = socket.getaddrinfo

    def rebinding(host, port, *args, **kwargs):
        if host == "hooks.rebind.test":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (next(answers), port))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    delivery = a_delivery(f"http://hooks.rebind.test:{checked.server_port}/hook")
    try:
        assert deliver(delivery_id=delivery.id) == "delivered"
    finally:
        checked.shutdown()
        internal.shutdown()
    assert (checked.hits, internal.hits) == (1, 0)


def test_a_receivers_answer_is_never_copied_into_the_delivery(db, settings):
    settings.RELAY_WEBHOOK_ALLOW_PRIVATE = True
    server = Answering("127.0.0.1", 0, status=404)
    delivery = a_delivery(f"http://127.0.0.1:{server.server_port}/hook")
    try:
        assert deliver(delivery_id=delivery.id) == "failed"
    finally:
        server.shutdown()
    delivery.refresh_from_db()
    assert delivery.last_error == "HTTP 404" and delivery.last_status_code == 404
    assert SECRET_BODY.decode() not in delivery.last_error


def test_a_receiver_that_answers_one_byte_at_a_time_is_cut_off_at_the_deadline(db, settings):
    settings.RELAY_WEBHOOK_ALLOW_PRIVATE = True
    settings.RELAY_WEBHOOK_TIMEOUT_SECONDS = 1

    def drip(connection, stopped) -> None:
        for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 1000:
            if stopped.wait(0.3):
                return
            connection.sendall(bytes([byte]))

    server = RawServer(drip)
    delivery = a_delivery(f"http://127.0.0.1:{server.port}/hook")
    started = time.monotonic()
    try:
        with pytest.raises(RetryableDelivery):
            deliver(delivery_id=delivery.id)
    finally:
        server.stop()
    assert time.monotonic() - started < 30  # the total deadline, not the 300 s a drip would last
    delivery.refresh_from_db()
    assert delivery.last_error.startswith("timed out") and delivery.claim is None


def test_a_broken_answer_is_recorded_and_released_not_left_claimed(db, settings):
    settings.RELAY_WEBHOOK_ALLOW_PRIVATE = True

    def broken(connection, stopped) -> None:
        connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\nContent-Encoding: gzip\r\n\r\nnot-gzip")

    server = RawServer(broken)
    delivery = a_delivery(f"http://127.0.0.1:{server.port}/hook")
    try:
        outcome = None
        try:
            outcome = deliver(delivery_id=delivery.id)
        except RetryableDelivery:
            outcome = "retry"
    finally:
        server.stop()
    delivery.refresh_from_db()
    assert outcome in ("delivered", "retry")
    assert delivery.claim is None, "the delivery was left claimed"


def test_a_delivery_whose_attempts_are_all_lost_becomes_a_dead_letter(db, settings):
    """A receiver that takes its worker down with it each time must not be retried for ever."""
    delivery = a_delivery("http://127.0.0.1:9/hook")
    WebhookDelivery.objects.filter(id=delivery.id).update(
        attempts=settings.RELAY_WEBHOOK_MAX_RETRIES + 1, lease_until=timezone.now() - timedelta(seconds=1))
    assert lapsed_requeue() == []
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.FAILED and "lost" in delivery.last_error


# Each carries a private IPv4 address (or is private itself): IPv4-compatible, mapped,
# translated, NAT64 (both prefixes), 6to4, Teredo (client 127.0.0.1), site-local, loopback.
WRAPPED_PRIVATE = ["::7f00:1", "::a9fe:a9fe", "::ffff:127.0.0.1", "::ffff:0:7f00:1", "64:ff9b::7f00:1",
                   "64:ff9b::a00:1", "64:ff9b:1::1", "2002:7f00:1::1", "2001:0:4136:e378:8000:63bf:80ff:fffe",
                   "fec0::1", "::1"]


@pytest.mark.parametrize("address", WRAPPED_PRIVATE)
def test_nat64_and_other_wrapped_private_addresses_are_refused(settings, address):
    settings.RELAY_WEBHOOK_ALLOW_PRIVATE = False
    with pytest.raises(PrivateAddress):
        check_url(f"http://[{address}]/hook")


@pytest.mark.parametrize("address", WRAPPED_PRIVATE)
def test_the_delivery_rule_judges_a_carried_ipv4_address_by_itself(address):
    assert core_http.public(ipaddress.ip_address(address)) is False


@pytest.mark.parametrize("address", ["::808:808", "::ffff:8.8.8.8", "::ffff:0:808:808", "64:ff9b::808:808",
                                     "2002:808:808::1", "2001:0:4136:e378:8000:63bf:f7f7:f7f7"])
def test_an_ipv6_address_carrying_a_public_ipv4_one_is_public(address):
    assert core_http.public(ipaddress.ip_address(address)) is True


def test_a_nat64_address_of_a_public_one_is_allowed(settings):
    settings.RELAY_WEBHOOK_ALLOW_PRIVATE = False
    assert core_http.resolve_checked("http://[64:ff9b::808:808]/hook") == "64:ff9b::808:808"


def test_a_refused_url_does_not_say_what_its_name_resolves_to(client_pro, settings):
    settings.RELAY_WEBHOOK_ALLOW_PRIVATE = False
    for url in ("http://localhost:8080/hook", "http://no-such-name.invalid/hook"):
        response = client_pro.post("/api/v1/webhooks", {"url": url, "events": ["message.received"]}, format="json")
        assert response.status_code == 400
        message = response.json()["fields"]["url"][0]
        assert "127.0.0.1" not in message and "::1" not in message
        assert message.endswith("does not resolve to a public address.")


def test_an_account_cannot_add_more_webhooks_than_the_cap(client_pro, settings):
    """The attack: many webhooks on one account turn one inbound mail into many POSTs."""
    settings.RELAY_WEBHOOK_ALLOW_PRIVATE = True
    settings.RELAY_MAX_WEBHOOKS = 3
    body = {"url": "http://127.0.0.1:9/hook", "events": ["message.received"]}
    codes = [client_pro.post("/api/v1/webhooks", body, format="json").status_code for _ in range(4)]
    assert codes == [201, 201, 201, 429]
    refused = client_pro.post("/api/v1/webhooks", body, format="json")
    assert refused.json()["code"] == "quota_exceeded" and "Retry-After" in refused
    hook = client_pro.get("/api/v1/webhooks").json()["results"][0]
    assert client_pro.delete(f"/api/v1/webhooks/{hook['id']}").status_code == 204
    assert client_pro.post("/api/v1/webhooks", body, format="json").status_code == 201
