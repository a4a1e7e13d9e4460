"""The outbound HTTP client's one deadline (SECURITY.md, "Outside calls"): a server that
sends the headers of its answer, then its body a byte a second, holds a webhook delivery,
a client ID document's fetch or a link check no longer than the deadline; against a real
drip server over real sockets."""
import time

import pytest
from oauth2_provider.cimd import CIMDError
from oauth2_provider.settings import oauth2_settings

from api.oauth import ClientDocumentFetcher
from checks.links import links_check_urls
from tests.drip_server import DripServer, server_tls
from tests.helpers import a_delivery
from webhooks.delivery import deliver

# Longer than a byte's interval, so that no single read waits long enough to time out.
DEADLINE = 2
# What a call may take past its deadline: the cut itself, and a loaded machine's scheduling.
MARGIN = 1.5


@pytest.fixture
def trusting(settings, certificates):  # noqa: F811 (the fixture imported above)
    """Outbound calls may reach this machine and trust the suite's CA."""
    settings.RELAY_WEBHOOK_ALLOW_PRIVATE = True
    settings.RELAY_LINK_CHECK_ALLOW_PRIVATE = True
    settings.RELAY_WEBHOOK_CA_FILE = str(certificates / "ca.pem")
    return certificates


@pytest.fixture
def drip():
    server = DripServer(lasts=10)
    yield server
    server.stop()


@pytest.fixture
def tls_drip(trusting):
    server = DripServer(tls=server_tls(trusting), lasts=10)
    yield server
    server.stop()


def test_a_webhook_receiver_that_drips_its_answer_is_cut_off_at_the_deadline(db, settings, drip):
    settings.RELAY_WEBHOOK_ALLOW_PRIVATE = True
    settings.RELAY_WEBHOOK_TIMEOUT_SECONDS = DEADLINE
    delivery = a_delivery(f"http://127.0.0.1:{drip.port}/hook")
    started = time.monotonic()
    # Its 200 came in time: delivered, the rest of the answer never waited for.
    assert deliver(delivery_id=delivery.id) == "delivered"
    assert time.monotonic() - started < DEADLINE + MARGIN


def test_a_client_id_document_that_drips_is_cut_off_at_the_deadline(tls_drip, monkeypatch):
    monkeypatch.setattr(oauth2_settings, "CIMD_FETCH_TIMEOUT_SECONDS", DEADLINE)
    started = time.monotonic()
    with pytest.raises(CIMDError, match=f"no complete answer within {DEADLINE} s"):
        ClientDocumentFetcher().fetch(f"https://localhost:{tls_drip.port}/agent/client.json")
    assert time.monotonic() - started < DEADLINE + MARGIN


def test_a_link_that_drips_is_cut_off_at_the_deadline(tls_drip, settings):
    settings.RELAY_LINK_CHECK_TIMEOUT_SECONDS = DEADLINE
    started = time.monotonic()
    [result] = links_check_urls([f"https://localhost:{tls_drip.port}/page"])
    assert time.monotonic() - started < DEADLINE + MARGIN
    assert result["status_code"] == 200 and result["ok"]  # its headers are all a link check reads


def test_a_client_id_document_served_with_a_lowercase_content_type_is_accepted(trusting):
    document = b'{"client_id": "x", "client_name": "An agent", "redirect_uris": ["https://agent.example/cb"]}'
    server = DripServer(tls=server_tls(trusting), whole=document)
    try:
        found, _ = ClientDocumentFetcher().fetch(f"https://localhost:{server.port}/agent/client.json")
    finally:
        server.stop()
    assert found["client_name"] == "An agent"
