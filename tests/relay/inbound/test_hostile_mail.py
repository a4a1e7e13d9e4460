"""Mail built to hurt the reader, sent over a real SMTP socket and read over the API, as an
attacker and a client would (docs/api.md, "Codes and links"): reading a message costs the
same whatever it holds, and what it holds is computed once, when it is stored. Also mail
written in UTF-8 headers (SMTPUTF8, RFC 6532), stored as written."""
import time

import pytest

from mailboxes.models import MessageContent
from mailboxes.mail_format import text_of_html
from relay.ingest import find_codes, find_links
from tests import mail_corpus as corpus
from tests.mail_corpus import send

# A guard against quadratic extraction, not a latency goal: each attack below took 4 to
# 200 s before the extraction was made linear, where a linear read takes milliseconds.
READ_SECONDS = 3.0


def mail(address: str, body: str, *, subtype: str = "plain") -> bytes:
    """`body` quoted-printable: SMTP lines stop at 1,000 bytes, the decoded body does not."""
    return corpus.mail(address, "Your code", body, subtype=subtype, cte="quoted-printable")


def read_detail(client, box: dict) -> tuple[dict, float]:
    listed = client.get(f"/api/v1/mailboxes/{box['id']}/messages").json()["results"]
    started = time.monotonic()
    response = client.get(f"/api/v1/mailboxes/{box['id']}/messages/{listed[0]['id']}")
    elapsed = time.monotonic() - started
    assert response.status_code == 200
    return response.json(), elapsed


def test_a_mail_of_digits_after_a_code_word_does_not_stall_its_reads(smtp_server, client_pro, box):
    send(smtp_server.port, box["address"], mail(box["address"], "Your code is below\r\n" + "1" * 150_000))
    detail, elapsed = read_detail(client_pro, box)
    assert elapsed < READ_SECONDS, elapsed
    assert detail["codes"] == []


def test_a_long_word_before_an_at_sign_does_not_stall_its_reads(smtp_server, client_pro, box):
    send(smtp_server.port, box["address"], mail(box["address"], "code 482913 " + "a" * 60_000 + "@"))
    detail, elapsed = read_detail(client_pro, box)
    assert elapsed < READ_SECONDS and detail["codes"] == ["482913"]


def test_an_html_body_of_unclosed_head_tags_does_not_stall_reads_or_search(smtp_server, client_pro, box):
    send(smtp_server.port, box["address"], mail(box["address"], "<head" * 20_000, subtype="html"))
    detail, elapsed = read_detail(client_pro, box)
    assert elapsed < READ_SECONDS, elapsed
    started = time.monotonic()
    assert client_pro.get("/api/v1/messages", {"q": "anything"}).status_code == 200
    assert time.monotonic() - started < READ_SECONDS


def test_anchors_that_never_close_do_not_stall_its_reads(smtp_server, client_pro, box):
    body = '<a href="https://example.com/verify">Verify</a>' + "<a " * 50_000
    send(smtp_server.port, box["address"], mail(box["address"], body, subtype="html"))
    detail, elapsed = read_detail(client_pro, box)
    assert elapsed < READ_SECONDS, elapsed
    assert detail["links"][0] == {"url": "https://example.com/verify", "text": "Verify"}


def test_codes_and_links_are_computed_when_stored_not_when_read(smtp_server, client_pro, box):
    send(smtp_server.port, box["address"], mail(
        box["address"], '<p>Your code is 551100</p><a href="https://example.com/a?x=1&amp;y=2">Open</a>',
        subtype="html"))
    content = MessageContent.objects.get()
    assert content.codes == ["551100"]
    assert content.links == [{"url": "https://example.com/a?x=1&y=2", "text": "Open"}]

    # A read shows what was stored, whatever the text says: nothing is extracted again.
    MessageContent.objects.update(codes=["000000"], links=[{"url": "https://example.com/stored", "text": "Stored"}])
    detail, _ = read_detail(client_pro, box)
    assert detail["codes"] == ["000000"] and detail["links"] == [{"url": "https://example.com/stored", "text": "Stored"}]


@pytest.mark.parametrize("text", [
    "1" * 200_000, "a" * 200_000 + "@", "a@" * 100_000, "a." * 100_000 + "@", "<head" * 40_000,
    "<" * 200_000, "<a " * 60_000, "<a href='x'>" * 20_000, "code +" + "1 " * 90_000, "code (12) " + "1 " * 90_000,
    "code " + "a1" * 90_000, "<script" * 30_000, "&#" * 100_000, "code 1234 " * 20_000,
], ids=lambda text: repr(text[:8]))
def test_no_text_makes_the_extraction_slow(text):
    started = time.monotonic()
    find_codes("Your code", text)
    find_links(text, text)
    text_of_html(text)
    assert time.monotonic() - started < READ_SECONDS


# --- UTF-8 in headers (SMTPUTF8) ----------------------------------------------------------------
UTF8_MAIL = ("From: Jörg <jörg@exämple.org>\r\nTo: {address}\r\nSubject: Привет, код 123456\r\n"
             "Content-Type: text/plain; charset=utf-8\r\n\r\nПривет!\r\n")


def test_utf8_headers_sent_with_smtputf8_are_stored_as_written(smtp_server, client_pro, box):
    send(smtp_server.port, box["address"], UTF8_MAIL.format(address=box["address"]).encode(), utf8=True)
    detail, _ = read_detail(client_pro, box)
    assert detail["subject"] == "Привет, код 123456"
    assert detail["from"] == "Jörg <jörg@exämple.org>"
    assert ["Subject", "Привет, код 123456"] in detail["headers"]
    assert detail["codes"] == ["123456"]


def test_utf8_headers_sent_without_the_extension_are_stored_as_written(smtp_server, client_pro, box):
    send(smtp_server.port, box["address"], UTF8_MAIL.format(address=box["address"]).encode())
    detail, _ = read_detail(client_pro, box)
    assert detail["subject"] == "Привет, код 123456" and detail["from"] == "Jörg <jörg@exämple.org>"


def test_other_8bit_header_bytes_are_kept_readable_and_the_raw_bytes_whole(smtp_server, client_pro, box):
    raw = (f"From: x@example.com\r\nTo: {box['address']}\r\nSubject: Caf\xe9 cr\xe8me\r\n\r\nbody\r\n"
           .encode("latin-1"))
    send(smtp_server.port, box["address"], raw)
    detail, _ = read_detail(client_pro, box)
    assert detail["subject"] == "Café crème"
    assert client_pro.get(f"/api/v1/mailboxes/{box['id']}/messages/{detail['id']}/raw").content == raw
