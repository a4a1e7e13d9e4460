"""GET …/checks/spam against a real spamd (Debian's SpamAssassin, started by the suite)."""
from tests import mail_corpus

GTUBE = "XJS*C4JDBQADN1.NSBN3*2IDNEN*GTUBE-STANDARD-ANTI-UBE-TEST-EMAIL*C.34X"


def test_gtube_is_spam(received, checks_of, spamd_server, settings):
    settings.RELAY_SPAMD_URL = spamd_server.url
    message_id = received(lambda to: mail_corpus.mail(to, "Offer", f"Buy now.\n{GTUBE}\n"))
    response = checks_of(message_id, "spam")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["is_spam"] is True and body["score"] >= 1000 and body["threshold"] == 5.0
    gtube = next(rule for rule in body["rules"] if rule["name"] == "GTUBE")
    assert gtube["score"] == 1000 and "Generic Test for Unsolicited Bulk Email" in gtube["description"]


def test_a_plain_mail_is_not_spam(received, checks_of, spamd_server, settings):
    settings.RELAY_SPAMD_URL = spamd_server.url
    body = checks_of(received(mail_corpus.plain), "spam").json()
    assert body["is_spam"] is False and body["score"] < body["threshold"]
    assert all({"name", "score", "description"} == set(rule) for rule in body["rules"])
    assert round(sum(rule["score"] for rule in body["rules"]), 1) == round(body["score"], 1)


def test_spamd_down_is_503(received, checks_of, settings):
    from tests.ports import free_port

    settings.RELAY_SPAMD_URL = f"spamd://127.0.0.1:{free_port()}"  # nothing listens there
    response = checks_of(received(mail_corpus.plain), "spam")
    assert response.status_code == 503 and response.json()["code"] == "backend_unavailable"


def test_spamd_stopped_is_503(received, checks_of, tmp_path, settings):
    from tests.ports import free_port
    from tests.spamd_server import SpamdServer, installed

    if not installed():
        import pytest
        pytest.skip("spamd is not installed")
    server = SpamdServer(tmp_path, free_port()).start()
    settings.RELAY_SPAMD_URL = server.url
    message_id = received(mail_corpus.plain)
    assert checks_of(message_id, "spam").status_code == 200
    server.stop()
    response = checks_of(message_id, "spam")
    assert response.status_code == 503 and response.json()["code"] == "backend_unavailable"


def test_without_spamd_the_check_is_not_configured(received, checks_of, settings):
    settings.RELAY_SPAMD_URL = ""
    response = checks_of(received(mail_corpus.plain), "spam")
    assert response.status_code == 404
    assert response.json() == {"code": "not_configured",
                               "message": "No spam checker is configured here (RELAY_SPAMD_URL is not set)."}
