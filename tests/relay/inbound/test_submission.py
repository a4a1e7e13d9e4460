"""The sandboxes' submission port (docs/sandbox.md), with real senders: smtplib over
STARTTLS with AUTH, swaks, Django's own SMTP EmailBackend. Any sender, any recipients, the
message caught once with its envelope and never delivered; 530 before AUTH, 535 5.7.8 for
every wrong login, a lock-out after ten; a password rotated or a sandbox deleted fails at once."""
import shutil
import smtplib
import socket
import ssl
import subprocess

import pytest
import redis
from django.conf import settings as django_settings
from django.core.mail import EmailMessage
from django.core.mail.backends.smtp import EmailBackend

from mailboxes.models import Message
from relay.inbound.submission import FAILURES_ALLOWED, FAILURES_KEY
from tests.conftest import SmtpServerThread
from tests.helpers import create_mailbox

MAIL = b"From: app@staging.example\r\nTo: alice@customer.example\r\nSubject: Welcome\r\n\r\nHello Alice\r\n"


@pytest.fixture
def no_auth_failures():
    """Every test starts with no failed AUTH counted for this host (the count is shared
    by every SMTP process, in the events Redis), and leaves none."""
    client = redis.Redis.from_url(django_settings.RELAY_EVENTS_REDIS_URL)
    keys = [FAILURES_KEY + host for host in ("127.0.0.1", _outward_address() or "127.0.0.1")]
    client.delete(*keys)
    yield
    client.delete(*keys)
    client.close()


@pytest.fixture
def submission(transactional_db, settings, certificates, no_auth_failures):
    settings.RELAY_SMTP_TLS_CERT = str(certificates / "server.pem")
    settings.RELAY_SMTP_TLS_KEY = str(certificates / "server.key")
    server = SmtpServerThread(submission=True).start()
    yield server
    server.stop()


@pytest.fixture
def tls(certificates) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(certificates / "ca.pem"))


def _outward_address() -> str | None:
    """An address of this host that is not loopback, if it has one."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the route
        address = probe.getsockname()[0]
    except OSError:
        return None
    finally:
        probe.close()
    return None if address.startswith("127.") else address


def _login(port: int, tls: ssl.SSLContext | None, username: str, password: str) -> smtplib.SMTP:
    """A session signed in with one AUTH PLAIN (smtplib's login() would try LOGIN after a
    refused PLAIN: two failures)."""
    smtp = smtplib.SMTP("127.0.0.1", port, timeout=10)
    if tls is not None:
        smtp.starttls(context=tls)
    smtp.ehlo()
    smtp.user, smtp.password = username, password
    try:
        smtp.auth("PLAIN", smtp.auth_plain)
    except smtplib.SMTPException:
        smtp.close()
        raise
    return smtp


def test_smtplib_over_starttls_submits_to_anyone_and_the_sandbox_catches_it_once(submission, tls, client_pro):
    box = create_mailbox(client_pro, sandbox=True)
    smtp_settings = box["smtp"]
    with smtplib.SMTP("127.0.0.1", submission.submission_port, timeout=10) as smtp:
        smtp.ehlo()
        assert smtp.has_extn("starttls")
        smtp.starttls(context=tls)
        smtp.ehlo()
        assert set(smtp.esmtp_features["auth"].split()) == {"LOGIN", "PLAIN"}
        smtp.login(smtp_settings["username"], smtp_settings["password"])
        refused = smtp.sendmail("no-reply@staging.example",
                                ["alice@customer.example", "bob@other.example", "audit@staging.example"], MAIL)
    assert refused == {}
    caught = Message.objects.get(mailbox_id=box["id"])  # once, whatever the recipients
    assert caught.subject == "Welcome"
    detail = client_pro.get(f"/api/v1/mailboxes/{box['id']}/messages/{caught.id}").json()
    assert detail["envelope"] == {"mail_from": "no-reply@staging.example",
                                  "rcpt_to": ["alice@customer.example", "bob@other.example", "audit@staging.example"]}
    listed = client_pro.get(f"/api/v1/mailboxes/{box['id']}/messages", {"rcpt": "Bob@Other.example"}).json()
    assert [row["id"] for row in listed["results"]] == [caught.id]
    assert client_pro.get(f"/api/v1/mailboxes/{box['id']}/messages",
                          {"rcpt": "carol@customer.example"}).json()["results"] == []


def test_auth_is_offered_only_after_starttls_to_a_client_off_this_host(transactional_db, settings, certificates,
                                                                        no_auth_failures, client_pro):
    address = _outward_address()
    if address is None:
        pytest.skip("this host has no address but loopback to connect from")
    settings.RELAY_SMTP_TLS_CERT = str(certificates / "server.pem")
    settings.RELAY_SMTP_TLS_KEY = str(certificates / "server.key")
    server = SmtpServerThread(submission=True, host=address).start()
    try:
        box = create_mailbox(client_pro, sandbox=True)
        with smtplib.SMTP(address, server.submission_port, timeout=10) as smtp:
            smtp.ehlo()
            assert not smtp.has_extn("auth")
            code, text = smtp.docmd("AUTH", "PLAIN")
            assert code == 538
            # The test's certificate names 127.0.0.1 and localhost, not this address: the chain is checked.
            chain_only = ssl.create_default_context(cafile=str(certificates / "ca.pem"))
            chain_only.check_hostname = False
            smtp.starttls(context=chain_only)
            smtp.ehlo()
            assert smtp.has_extn("auth")
            smtp.login(box["smtp"]["username"], box["smtp"]["password"])
            assert smtp.sendmail("a@staging.example", ["b@customer.example"], MAIL) == {}
    finally:
        server.stop()
    assert Message.objects.filter(mailbox_id=box["id"]).count() == 1


def test_nothing_is_taken_before_auth(submission):
    with smtplib.SMTP("127.0.0.1", submission.submission_port, timeout=10) as smtp:
        smtp.ehlo()
        code, text = smtp.docmd("MAIL", "FROM:<a@staging.example>")
        assert code == 530, text


@pytest.mark.parametrize("wrong", ["password", "username"])
def test_a_wrong_password_or_an_unknown_username_is_535_5_7_8(submission, client_pro, wrong):
    box = create_mailbox(client_pro, sandbox=True)
    username, password = box["smtp"]["username"], box["smtp"]["password"]
    if wrong == "password":
        password = password[:-1] + ("x" if password[-1] != "x" else "y")
    else:
        username = "nobody@" + username.partition("@")[2]
    with pytest.raises(smtplib.SMTPAuthenticationError) as refused:
        _login(submission.submission_port, None, username, password)
    assert refused.value.smtp_code == 535 and refused.value.smtp_error.startswith(b"5.7.8")


def test_a_mailbox_that_is_no_sandbox_has_no_login(submission, client_pro):
    box = create_mailbox(client_pro)
    with pytest.raises(smtplib.SMTPAuthenticationError):
        _login(submission.submission_port, None, box["address"], "rs_" + "a" * 43)


def test_a_rotated_password_fails_at_once_and_the_new_one_works(submission, client_pro):
    box = create_mailbox(client_pro, sandbox=True)
    old = box["smtp"]["password"]
    _login(submission.submission_port, None, box["address"], old).quit()
    new = client_pro.post(f"/api/v1/mailboxes/{box['id']}/smtp-password").json()["smtp"]["password"]
    with pytest.raises(smtplib.SMTPAuthenticationError):
        _login(submission.submission_port, None, box["address"], old)
    _login(submission.submission_port, None, box["address"], new).quit()


def test_a_deleted_sandbox_is_refused_at_once_even_mid_session(submission, client_pro):
    box = create_mailbox(client_pro, sandbox=True)
    smtp = _login(submission.submission_port, None, box["address"], box["smtp"]["password"])
    assert client_pro.delete(f"/api/v1/mailboxes/{box['id']}").status_code == 204
    with pytest.raises(smtplib.SMTPSenderRefused) as refused:
        smtp.sendmail("a@staging.example", ["b@customer.example"], MAIL)
    assert refused.value.smtp_code == 554
    smtp.close()
    with pytest.raises(smtplib.SMTPAuthenticationError):
        _login(submission.submission_port, None, box["address"], box["smtp"]["password"])
    assert not Message.objects.filter(mailbox_id=box["id"]).exists()


def test_ten_failures_lock_the_client_out_whatever_the_username(submission, client_pro):
    box = create_mailbox(client_pro, sandbox=True)
    for attempt in range(FAILURES_ALLOWED):
        with pytest.raises(smtplib.SMTPAuthenticationError) as refused:
            _login(submission.submission_port, None, f"guess{attempt}@relay.localhost", "rs_wrong")
        assert refused.value.smtp_code == 535
    # The right password now earns the same answer as any other: nothing to learn.
    for username, password in ((box["address"], box["smtp"]["password"]), ("nobody@relay.localhost", "rs_x")):
        with pytest.raises(smtplib.SMTPAuthenticationError) as locked:
            _login(submission.submission_port, None, username, password)
        assert locked.value.smtp_code == 454 and locked.value.smtp_error.startswith(b"4.7.0")


def test_the_101st_recipient_is_452_4_5_3(submission, client_pro):
    box = create_mailbox(client_pro, sandbox=True)
    with _login(submission.submission_port, None, box["address"], box["smtp"]["password"]) as smtp:
        smtp.mail("a@staging.example")
        for number in range(100):
            assert smtp.rcpt(f"user{number}@customer.example")[0] == 250
        code, text = smtp.rcpt("one-too-many@customer.example")
        assert (code, text[:5]) == (452, b"4.5.3")
        smtp.data(MAIL)
    assert len(Message.objects.get(mailbox_id=box["id"]).rcpt_to) == 100


def test_a_message_over_the_size_is_552_5_3_4(transactional_db, settings, no_auth_failures, client_pro):
    settings.RELAY_MAX_MESSAGE_BYTES = 4096
    server = SmtpServerThread(submission=True).start()
    try:
        box = create_mailbox(client_pro, sandbox=True)
        with _login(server.submission_port, None, box["address"], box["smtp"]["password"]) as smtp:
            smtp.mail("a@staging.example")  # no SIZE declared: the size is found in DATA
            smtp.rcpt("b@customer.example")
            code, reply = smtp.data(MAIL + (b"x" * 70 + b"\r\n") * 100)
        assert (code, reply[:5]) == (552, b"5.3.4")
        assert not Message.objects.filter(mailbox_id=box["id"]).exists()
    finally:
        server.stop()


def test_a_full_sandbox_is_452_4_2_2(submission, client_pro, settings):
    box = create_mailbox(client_pro, sandbox=True)
    settings.RELAY_QUOTAS = {plan: {**limits, "stored_bytes_per_mailbox": 100}
                             for plan, limits in settings.RELAY_QUOTAS.items()}
    with _login(submission.submission_port, None, box["address"], box["smtp"]["password"]) as smtp:
        with pytest.raises(smtplib.SMTPDataError) as refused:
            smtp.sendmail("a@staging.example", ["b@customer.example"], MAIL + b"y" * 200 + b"\r\n")
    assert refused.value.smtp_code == 452 and refused.value.smtp_error.startswith(b"4.2.2")


def test_swaks_submits_over_starttls_with_auth(submission, client_pro, certificates):
    if shutil.which("swaks") is None:
        pytest.skip("swaks is not installed (scripts/test.sh installs Debian's where it may)")
    box = create_mailbox(client_pro, sandbox=True)
    finished = subprocess.run(
        ["swaks", "--server", "127.0.0.1", "--port", str(submission.submission_port), "--tls",
         "--tls-verify", "--tls-ca-path", str(certificates / "ca.pem"),
         "--auth", "PLAIN", "--auth-user", box["address"], "--auth-password", box["smtp"]["password"],
         "--from", "swaks@staging.example", "--to", "dave@customer.example",
         "--header", "Subject: from swaks", "--body", "hello", "--timeout", "10"],
        capture_output=True, text=True, timeout=60)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    caught = Message.objects.get(mailbox_id=box["id"])
    assert caught.subject == "from swaks" and caught.rcpt_to == ["dave@customer.example"]


def test_djangos_email_backend_sends_with_a_bcc_the_sandbox_shows(submission, client_pro, tls):
    box = create_mailbox(client_pro, sandbox=True)
    smtp = box["smtp"]
    backend = EmailBackend(host="127.0.0.1", port=submission.submission_port, username=smtp["username"],
                           password=smtp["password"], use_tls=smtp["security"] == "starttls", timeout=10)
    backend.ssl_context = tls  # the test's own certificate authority
    EmailMessage("Your order", "Thanks!", "shop@staging.example", ["alice@customer.example"],
                 bcc=["records@staging.example"], connection=backend).send()
    caught = Message.objects.get(mailbox_id=box["id"])
    detail = client_pro.get(f"/api/v1/mailboxes/{box['id']}/messages/{caught.id}").json()
    assert detail["envelope"]["rcpt_to"] == ["alice@customer.example", "records@staging.example"]
    assert "records@staging.example" not in detail["to"] and "Bcc" not in dict(detail["headers"])


def test_port_25_keeps_its_envelope_recipient_in_the_detail(smtp_server, client_pro):
    box = create_mailbox(client_pro)
    with smtplib.SMTP("127.0.0.1", smtp_server.port, timeout=10) as smtp:
        smtp.sendmail("a@example.com", [box["address"]], MAIL)
    message = Message.objects.get(mailbox_id=box["id"])
    detail = client_pro.get(f"/api/v1/mailboxes/{box['id']}/messages/{message.id}").json()
    assert detail["envelope"] == {"mail_from": "a@example.com", "rcpt_to": [box["address"]]}
    assert [row["id"] for row in client_pro.get(f"/api/v1/mailboxes/{box['id']}/messages",
                                                {"rcpt": box["address"]}).json()["results"]] == [message.id]
