"""Sandboxes through the API (docs/sandbox.md): created with SMTP settings shown once and a
password stored as its digest, for accounts and anonymous callers; rotation."""
from accounts.identity import secret_digest
from mailboxes.models import Mailbox
from tests.helpers import create_mailbox


def test_a_sandbox_is_created_with_its_smtp_settings_shown_once(client_pro, settings):
    settings.RELAY_SMTP_PUBLIC_HOST, settings.RELAY_SUBMISSION_PORT = "smtp.relay.test", 2587
    settings.RELAY_SMTP_TLS_CERT = "/etc/relay/tls/cert.pem"  # only read by the SMTP process
    box = create_mailbox(client_pro, sandbox=True, local_part="staging")
    assert box["sandbox"] is True
    smtp = box["smtp"]
    assert smtp == {"host": "smtp.relay.test", "port": 2587, "username": box["address"],
                    "password": smtp["password"], "security": "starttls"}
    assert len(smtp["password"]) >= 16
    stored = Mailbox.objects.get(id=box["id"])
    assert stored.smtp_password_hash == secret_digest(smtp["password"])
    assert smtp["password"] not in repr(Mailbox.objects.filter(id=box["id"]).values().get())
    shown_again = client_pro.get(f"/api/v1/mailboxes/{box['id']}").json()
    assert shown_again["sandbox"] is True and "smtp" not in shown_again


def test_a_relay_without_a_certificate_says_its_sandboxes_have_no_security(client_pro, settings):
    # make run has none: it offers no STARTTLS, so an app told "starttls" would fail to connect.
    settings.RELAY_SMTP_TLS_CERT = ""
    assert create_mailbox(client_pro, sandbox=True)["smtp"]["security"] == "none"
    box = create_mailbox(client_pro, sandbox=True)
    rotated = client_pro.post(f"/api/v1/mailboxes/{box['id']}/smtp-password").json()
    assert rotated["smtp"]["security"] == "none"


def test_a_mailbox_is_no_sandbox_unless_asked(client_pro):
    box = create_mailbox(client_pro)
    assert box["sandbox"] is False and "smtp" not in box
    assert Mailbox.objects.get(id=box["id"]).smtp_password_hash is None


def test_an_anonymous_caller_gets_a_sandbox_with_its_token(api):
    box = create_mailbox(api, sandbox=True)
    assert box["token"].startswith("rt_") and box["smtp"]["username"] == box["address"]


def test_rotation_gives_a_new_password_and_the_old_digest_is_gone(client_pro):
    box = create_mailbox(client_pro, sandbox=True)
    response = client_pro.post(f"/api/v1/mailboxes/{box['id']}/smtp-password")
    assert response.status_code == 200, response.content
    new = response.json()["smtp"]["password"]
    assert new != box["smtp"]["password"]
    assert Mailbox.objects.get(id=box["id"]).smtp_password_hash == secret_digest(new)


def test_rotation_of_a_mailbox_that_is_no_sandbox_is_400(client_pro):
    box = create_mailbox(client_pro)
    response = client_pro.post(f"/api/v1/mailboxes/{box['id']}/smtp-password")
    assert response.status_code == 400 and response.json()["code"] == "invalid_request"


def test_rotation_of_another_owners_sandbox_is_404(client_pro, make_client):
    box = create_mailbox(client_pro, sandbox=True)
    stranger = make_client("mallory", "pro")
    assert stranger.post(f"/api/v1/mailboxes/{box['id']}/smtp-password").status_code == 404
