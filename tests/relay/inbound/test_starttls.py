"""STARTTLS on the SMTP listener (RFC 3207): offered when RELAY_SMTP_TLS_CERT and
RELAY_SMTP_TLS_KEY are set, and a client that verifies the certificate delivers over it."""
import smtplib
import ssl

import pytest

from mailboxes.models import Message
from tests.conftest import SmtpServerThread
from tests.helpers import create_via_api


@pytest.fixture
def tls_smtp_server(transactional_db, settings, certificates):
    settings.RELAY_SMTP_TLS_CERT = str(certificates / "server.pem")
    settings.RELAY_SMTP_TLS_KEY = str(certificates / "server.key")
    server = SmtpServerThread().start()
    yield server
    server.stop()


def test_starttls_is_offered_and_a_verifying_client_delivers_over_it(tls_smtp_server, certificates, client_pro):
    box = create_via_api(client_pro, local_part="secret").json()
    context = ssl.create_default_context(cafile=str(certificates / "ca.pem"))
    with smtplib.SMTP("127.0.0.1", tls_smtp_server.port, timeout=10) as smtp:
        smtp.ehlo()
        assert smtp.has_extn("starttls")
        assert smtp.starttls(context=context)[0] == 220
        assert smtp.sock.version() in ("TLSv1.2", "TLSv1.3")
        smtp.ehlo()
        assert not smtp.has_extn("starttls")  # offered once, on the clear connection
        assert smtp.sendmail("a@example.com", [box["address"]], b"Subject: over TLS\r\n\r\nhello\r\n") == {}
    assert Message.objects.get(mailbox_id=box["id"]).subject == "over TLS"


def test_a_client_that_verifies_refuses_a_certificate_it_does_not_trust(tls_smtp_server):
    with smtplib.SMTP("127.0.0.1", tls_smtp_server.port, timeout=10) as smtp:
        with pytest.raises(ssl.SSLCertVerificationError):
            smtp.starttls(context=ssl.create_default_context())


def test_a_tls_session_counts_once_against_the_per_client_cap(tls_smtp_server, settings, certificates):
    from relay.inbound.server import RelaySMTP

    settings.RELAY_SMTP_MAX_CONNECTIONS_PER_CLIENT = 1
    context = ssl.create_default_context(cafile=str(certificates / "ca.pem"))
    with smtplib.SMTP("127.0.0.1", tls_smtp_server.port, timeout=10) as smtp:
        smtp.starttls(context=context)
        assert smtp.noop()[0] == 250
        assert len(RelaySMTP.sessions) == 1


def test_without_a_certificate_starttls_is_not_offered(smtp_server):
    with smtplib.SMTP("127.0.0.1", smtp_server.port, timeout=10) as smtp:
        smtp.ehlo()
        assert not smtp.has_extn("starttls")
