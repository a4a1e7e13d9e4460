"""Attachments (docs/api.md, "Attachments"): mail with attachments sent over a real SMTP
socket, each one listed with an id and a download URL, and downloaded as the exact bytes
it carried, served so that a hostile one cannot run on Relay's origin."""
import os
import smtplib

import pytest

from mailboxes.models import Mailbox
from tests.conftest import SmtpServerThread
from tests.helpers import create_via_api
from tests.mail_corpus import send_mail


def send_files(port: int, address: str, *files: tuple[bytes, str, str]) -> None:
    """A mail carrying `files`, each (bytes, content type, filename)."""
    send_mail(port, address, "files", "See the attached files.", attachments=list(files))


def only_message(client, box: dict) -> dict:
    listed = client.get(f"/api/v1/mailboxes/{box['id']}/messages").json()["results"]
    assert len(listed) == 1
    response = client.get(f"/api/v1/mailboxes/{box['id']}/messages/{listed[0]['id']}")
    assert response.status_code == 200
    return response.json()


def test_twenty_attachments_are_listed_and_each_downloads_as_its_exact_bytes(smtp_server, client_pro, box):
    files = [(os.urandom(1000 + i), "application/pdf", f"report-{i}.pdf") for i in range(20)]
    send_files(smtp_server.port, box["address"], *files)
    attachments = only_message(client_pro, box)["attachments"]
    assert [a["id"] for a in attachments] == list(range(1, 21))
    assert [a["filename"] for a in attachments] == [name for _, _, name in files]
    for attachment, (payload, _, name) in zip(attachments, files):
        assert attachment["download_url"].startswith("http://testserver/api/v1/mailboxes/")
        response = client_pro.get(attachment["download_url"])
        assert response.status_code == 200 and response.content == payload
        assert response["Content-Type"] == "application/pdf"
        assert response["Content-Disposition"] == f'attachment; filename="{name}"'


def test_every_download_is_sandboxed_never_sniffed_and_an_attachment(smtp_server, client_pro, box):
    send_files(smtp_server.port, box["address"], (b"name,count\na,1\n", "text/csv", "counts.csv"))
    attachment = only_message(client_pro, box)["attachments"][0]
    response = client_pro.get(attachment["download_url"])
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Content-Security-Policy"].startswith("sandbox")
    assert response["Content-Disposition"].startswith("attachment;")
    assert response["Content-Type"] == "text/csv; charset=utf-8"


@pytest.mark.parametrize("content_type", ["text/html", "image/svg+xml", "application/xhtml+xml", "text/xml",
                                          "application/javascript"])
def test_an_attachment_that_could_run_in_a_browser_is_never_served_as_its_type(
        smtp_server, client_pro, box, content_type):
    script = b"<script>fetch('/api/v1/mailboxes').then(r => r.text()).then(alert)</script>"
    send_files(smtp_server.port, box["address"], (script, content_type, "open-me.html"))
    attachment = only_message(client_pro, box)["attachments"][0]
    assert attachment["content_type"] == content_type  # described as declared
    response = client_pro.get(attachment["download_url"])
    assert response.content == script
    assert response["Content-Type"] == "application/octet-stream"
    assert response["Content-Security-Policy"].startswith("sandbox")


def test_a_filename_with_a_path_quotes_and_control_characters_is_made_safe(smtp_server, client_pro, box):
    send_files(smtp_server.port, box["address"], (b"x", "application/pdf", '..\\../etc/"pass\x07\twd".pdf'))
    attachment = only_message(client_pro, box)["attachments"][0]
    disposition = client_pro.get(attachment["download_url"])["Content-Disposition"]
    assert disposition.startswith("attachment; filename=")
    assert "/" not in disposition and "\\" not in disposition and "\x07" not in disposition and "\t" not in disposition
    assert disposition.count('"') == 2  # the quotes around the name, and none inside it


def test_an_unknown_attachment_is_404_and_one_of_an_expired_mailbox_410(smtp_server, client_pro, box):
    send_files(smtp_server.port, box["address"], (b"data", "application/zip", "a.zip"))
    attachment = only_message(client_pro, box)["attachments"][0]
    base = attachment["download_url"].rsplit("/", 1)[0]
    assert client_pro.get(f"{base}/2").status_code == 404
    assert client_pro.get(f"{base}/0").status_code == 404
    Mailbox.objects.filter(id=box["id"]).update(status="expired")
    response = client_pro.get(attachment["download_url"])
    assert response.status_code == 410 and response.json()["code"] == "expired"


def test_another_owners_attachment_is_404(smtp_server, client_pro, make_client, box):
    send_files(smtp_server.port, box["address"], (b"secret", "application/pdf", "s.pdf"))
    attachment = only_message(client_pro, box)["attachments"][0]
    assert make_client("mallory").get(attachment["download_url"]).status_code == 404


@pytest.fixture
def large_smtp_server(settings, transactional_db):
    settings.RELAY_MAX_MESSAGE_BYTES = 32 * 1024 * 1024
    server = SmtpServerThread().start()
    yield server
    server.stop()


def test_a_20_mb_attachment_is_stored_and_downloaded_whole_when_the_limit_allows(large_smtp_server, client_pro):
    box = create_via_api(client_pro, local_part="large").json()
    payload = os.urandom(20 * 1024 * 1024)
    send_files(large_smtp_server.port, box["address"], (payload, "application/zip", "large.zip"))
    attachment = only_message(client_pro, box)["attachments"][0]
    assert attachment["size"] == len(payload)
    assert client_pro.get(attachment["download_url"]).content == payload


def test_the_message_size_limit_still_holds_for_attachments(smtp_server, client_pro, settings, box):
    payload = os.urandom(settings.RELAY_MAX_MESSAGE_BYTES)
    with pytest.raises(smtplib.SMTPException) as refused:
        send_files(smtp_server.port, box["address"], (payload, "application/zip", "too-large.zip"))
    assert "552" in str(refused.value) or getattr(refused.value, "smtp_code", None) == 552
    assert client_pro.get(f"/api/v1/mailboxes/{box['id']}/messages").json()["results"] == []


# --- attachments a sender shaped (SECURITY.md, "Attachments") ----------------------------------
def raw_with_attachment(address: str, content_type_line: str, disposition_line: str) -> bytes:
    return (f"From: sender@example.com\r\nTo: {address}\r\nSubject: shaped\r\nMIME-Version: 1.0\r\n"
            "Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\nhi\r\n"
            f"--b\r\n{content_type_line}\r\n{disposition_line}\r\n\r\nname,count\r\na,1\r\n--b--\r\n").encode()


@pytest.mark.parametrize("charset", ["utf-8''%0D%0AX-Injected:%201", "no-such-charset", "utf-8\\u0000"])
def test_a_charset_the_sender_shaped_is_dropped_not_a_500(smtp_server, client_pro, box, charset):
    raw = raw_with_attachment(box["address"], f"Content-Type: text/csv; charset*={charset}",
                              'Content-Disposition: attachment; filename="counts.csv"')
    with smtplib.SMTP("127.0.0.1", smtp_server.port, timeout=60) as smtp:
        smtp.sendmail("sender@example.com", [box["address"]], raw)
    attachment = only_message(client_pro, box)["attachments"][0]
    response = client_pro.get(attachment["download_url"])
    assert response.status_code == 200 and response.content == b"name,count\r\na,1"
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert "X-Injected" not in str(response.headers)


def test_a_filename_loses_its_control_and_format_characters(smtp_server, client_pro, box):
    disguised = "invoice\u202efdp.exe"
    zero_width = "re\u200bport\u2066.pdf"
    send_files(smtp_server.port, box["address"], (b"MZ", "application/octet-stream", disguised),
               (b"%PDF", "application/pdf", zero_width))
    first, second = only_message(client_pro, box)["attachments"]
    assert first["filename"] == "invoicefdp.exe" and second["filename"] == "report.pdf"
    response = client_pro.get(first["download_url"])
    assert response["Content-Disposition"] == 'attachment; filename="invoicefdp.exe"'
    assert client_pro.get(second["download_url"])["Content-Disposition"] == 'attachment; filename="report.pdf"'
