"""Messages for the tests: one builder (message, mail), one way to send them over SMTP
(send, send_mail), real-world shapes, and a corpus of malformed ones. All use CRLF line
endings, as they travel on the wire."""
import base64
import smtplib
import time
from email.message import EmailMessage
from email.utils import make_msgid, parseaddr


def message(to: str = "box@relay.localhost", subject: str = "Hello", text: str = "", *,
            sender: str = "service@example.com", html: str | None = None, subtype: str = "plain",
            cte: str | None = None, charset: str = "utf-8",
            attachments: list[tuple[bytes, str, str]] = ()) -> EmailMessage:
    """A mail as senders write them: `text` (of `subtype`), an HTML alternative, each in
    `charset` and `cte` (quoted-printable, base64, 8bit; chosen for it when None), and
    `attachments`, each (bytes, content type, filename). A Message-ID of its own (Cyrus
    drops a repeated one)."""
    built = EmailMessage()
    built["From"], built["To"], built["Subject"] = sender, to, subject
    built["Message-ID"] = make_msgid(domain="example.com")
    if html is not None and not text:
        built.set_content(html, subtype="html", charset=charset, cte=cte)
    else:
        built.set_content(text, subtype=subtype, charset=charset, cte=cte)
        if html is not None:
            built.add_alternative(html, subtype="html", charset=charset, cte=cte)
    for payload, content_type, filename in attachments:
        maintype, subtype_ = content_type.split("/")
        built.add_attachment(payload, maintype=maintype, subtype=subtype_, filename=filename)
    return built


def mail(to: str = "box@relay.localhost", subject: str = "Hello", text: str = "", **options) -> bytes:
    """message(...) as the bytes SMTP carries."""
    return crlf_bytes(message(to, subject, text, **options).as_bytes())


def send(port: int, to: str | list[str], raw: bytes, *, sender: str = "sender@example.com",
         utf8: bool = False, source: str = "127.0.0.1") -> dict:
    """One SMTP session that sends `raw` from the loopback address `source`; returns the
    recipients refused."""
    with smtplib.SMTP("127.0.0.1", port, timeout=60, source_address=(source, 0)) as smtp:
        return smtp.sendmail(sender, to, raw, mail_options=["SMTPUTF8"] if utf8 else [])


def send_mail(port: int, to: str, subject: str, text: str = "", **options) -> float:
    """Build a mail (message's options) and send it from its From address; returns the
    time.monotonic() of the 250."""
    sender = parseaddr(options.get("sender", "service@example.com"))[1]
    assert send(port, to, mail(to, subject, text, **options), sender=sender) == {}
    return time.monotonic()


def crlf(text: str) -> bytes:
    return text.replace("\r\n", "\n").replace("\n", "\r\n").encode("utf-8")


def crlf_bytes(data: bytes) -> bytes:
    return data.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")


PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")
PDF = b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n" * 20


def b64_lines(data: bytes) -> str:
    encoded = base64.b64encode(data).decode()
    return "\n".join(encoded[i:i + 76] for i in range(0, len(encoded), 76))


def plain(to: str) -> bytes:
    return crlf(f"""From: Alice Example <alice@example.com>
To: {to}
Subject: Plain hello
Date: Sun, 22 Nov 2026 08:00:00 +0000
Message-ID: <plain-1@example.com>
MIME-Version: 1.0
Content-Type: text/plain; charset=utf-8
Content-Transfer-Encoding: 8bit

Hello there, this is plain text with ünïcödé.
.Leading dot survives dot-stuffing.
""")


def alternative(to: str) -> bytes:
    return crlf(f"""From: =?utf-8?q?J=C3=BCrgen_M=C3=BCller?= <jm@example.de>
To: {to}
Subject: =?utf-8?b?8J+OiSBXZWxjb21lIHRvIFJlbGF5?=
MIME-Version: 1.0
Content-Type: multipart/alternative; boundary="alt-boundary"

--alt-boundary
Content-Type: text/plain; charset=utf-8
Content-Transfer-Encoding: quoted-printable

Your code is 4821. =E2=9C=93
--alt-boundary
Content-Type: text/html; charset=utf-8

<html><body><p>Your code is <b>4821</b>.</p></body></html>
--alt-boundary--
""")


def with_attachments(to: str) -> bytes:
    return crlf(f"""From: billing@example.com
To: {to}
Subject: Your invoice
MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="mix"

--mix
Content-Type: text/plain; charset=us-ascii

Invoice attached.
--mix
Content-Type: application/pdf; name="invoice.pdf"
Content-Disposition: attachment; filename="invoice.pdf"
Content-Transfer-Encoding: base64

{b64_lines(PDF)}
--mix
Content-Type: text/csv; charset=utf-8
Content-Disposition: attachment; filename*=utf-8''r%C3%A9sum%C3%A9.csv

a,b
1,2
--mix--
""")


def inline_image(to: str) -> bytes:
    return crlf(f"""From: news@example.com
To: {to}
Subject: Newsletter
MIME-Version: 1.0
Content-Type: multipart/related; boundary="rel"; type="multipart/alternative"

--rel
Content-Type: multipart/alternative; boundary="alt"

--alt
Content-Type: text/plain

See the logo.
--alt
Content-Type: text/html

<img src="cid:logo@example.com">
--alt--
--rel
Content-Type: image/png
Content-ID: <logo@example.com>
Content-Disposition: inline
Content-Transfer-Encoding: base64

{b64_lines(PNG)}
--rel--
""")


def latin1_and_koi8(to: str) -> bytes:
    body = "Grüße aus Köln — ça va?".encode("iso-8859-1", "replace")
    subject = "=?koi8-r?b?" + base64.b64encode("Привет".encode("koi8-r")).decode() + "?="
    return crlf_bytes(
        b"From: =?iso-8859-1?q?Fran=E7ois?= <f@example.fr>\n"
        + f"To: {to}\nSubject: {subject}\nMIME-Version: 1.0\n".encode()
        + b"Content-Type: text/plain; charset=iso-8859-1\nContent-Transfer-Encoding: 8bit\n\n"
        + body + b"\n"
    )


def newsletter(to: str, *, links: list[str] = ("https://shop.example.com/sale",
                                                "https://shop.example.com/unsubscribe?u=1")) -> bytes:
    """A marketing mail as template tools build it: a table layout with inline styles, a
    style sheet with @media and a dark-mode query, flex and grid, an SVG logo, a WebP
    hero, one-click unsubscribe headers (unsigned) and the links given."""
    anchors = "".join(f'<a href="{url}" style="color:#0a66c2;text-decoration:underline">Link {index}</a> '
                      for index, url in enumerate(links, 1))
    html = f"""<!DOCTYPE html>
<html lang="en"><head><meta name="color-scheme" content="light dark">
<style>
  .wrap {{ max-width: 600px; margin: 0 auto; }}
  .cards {{ display: flex; gap: 12px; }}
  .grid {{ display: grid; grid-template-columns: 1fr 1fr; }}
  a:hover {{ color: #004182; }}
  @media (max-width: 600px) {{ .cards {{ display: block; }} }}
  @media (prefers-color-scheme: dark) {{ body {{ background: #111; color: #eee; }} }}
</style></head>
<body style="margin:0;padding:0;background-color:#f4f4f4">
<table role="presentation" width="100%" cellpadding="0" cellspacing="0" class="wrap">
<tr><td align="center" style="padding:24px 0">
  <svg width="120" height="30" viewBox="0 0 120 30"><rect width="120" height="30" rx="6" fill="#0a66c2"/></svg>
</td></tr>
<tr><td><img src="https://cdn.example.com/hero.webp" width="600" alt="Winter sale" style="display:block;border-radius:8px"></td></tr>
<tr><td style="font-family:Arial,sans-serif;font-size:16px;line-height:1.5;padding:16px">
  <div class="cards"><div style="flex:1;padding:8px">Coats -30%</div><div style="flex:1;padding:8px">Boots -20%</div></div>
  <div class="grid"><p>Free returns</p><p>Next-day delivery</p></div>
  <p>{anchors}</p>
</td></tr></table></body></html>"""
    text = "Winter sale: coats -30%, boots -20%.\n" + "\n".join(links)
    return crlf(f"""From: Example Shop <news@shop.example.com>
To: {to}
Subject: Winter sale starts now
Date: Thu, 26 Nov 2026 09:00:00 +0000
Message-ID: <newsletter-2026-11@shop.example.com>
List-Unsubscribe: <https://shop.example.com/unsubscribe?u=1>, <mailto:unsubscribe@shop.example.com?subject=u1>
List-Unsubscribe-Post: List-Unsubscribe=One-Click
MIME-Version: 1.0
Content-Type: multipart/alternative; boundary="nl-boundary"

--nl-boundary
Content-Type: text/plain; charset=utf-8

{text}
--nl-boundary
Content-Type: text/html; charset=utf-8

{html}
--nl-boundary--
""")


REAL_WORLD = {"plain": plain, "alternative": alternative, "attachments": with_attachments,
              "inline_image": inline_image, "non_utf8_charsets": latin1_and_koi8, "newsletter": newsletter}


def _nested(depth: int) -> str:
    parts = []
    for level in range(depth):
        parts.append(f'Content-Type: multipart/mixed; boundary="b{level}"\n\n--b{level}\n')
    parts.append("Content-Type: text/plain\n\ndeep inside\n")
    for level in reversed(range(depth)):
        parts.append(f"--b{level}--\n")
    return "".join(parts)


def malformed(to: str) -> dict[str, bytes]:
    head = f"From: x@example.com\nTo: {to}\n"
    return {
        "missing_boundary": crlf(head + "Subject: no boundary\nContent-Type: multipart/mixed\n\n--x\nhello\n--x--\n"),
        "boundary_never_closed": crlf(head + 'Content-Type: multipart/mixed; boundary="b"\n\n--b\nContent-Type: text/plain\n\nunterminated\n'),
        "truncated_base64": crlf(head + "Content-Type: text/plain\nContent-Transfer-Encoding: base64\n\nSGVsbG8gV29y\nbGQh=x=\nQQ\n"),
        "truncated_base64_attachment": crlf(head + 'Content-Type: multipart/mixed; boundary="b"\n\n--b\nContent-Type: application/pdf\nContent-Disposition: attachment; filename="a.pdf"\nContent-Transfer-Encoding: base64\n\nJVBERi0xLjQK\nJVBER\n--b--\n'),
        "eight_bit_headers": crlf_bytes(b"From: \xff\xfe Bj\xf6rk <b@example.is>\nTo: " + to.encode() + b"\nSubject: caf\xe9 \x80\x81 r\xe9sum\xe9\n\nbody \xe9\n"),
        "header_line_over_998_bytes": crlf(head + "Subject: " + "long " * 400 + "\nX-Long: " + "y" * 5000 + "\n\nbody\n"),
        "nested_multipart_50_deep": crlf(head + _nested(50)),
        "nul_bytes": crlf_bytes(b"From: n\x00ul@example.com\nTo: " + to.encode() + b"\nSubject: a\x00b\n\nbody\x00with\x00nuls\n"),
        "no_headers_at_all": b"just a body line\r\n",
        "unknown_charset": crlf(head + "Subject: =?x-unknown?q?abc?=\nContent-Type: text/plain; charset=x-no-such-charset\n\nbody\n"),
        "bad_encoded_word": crlf(head + "Subject: =?utf-8?b?!!!notbase64?= =?utf-8?q?=ZZ?=\n\nbody\n"),
        "bad_content_type": crlf(head + "Content-Type: ;;;===\nContent-Disposition: attachment; filename=\n\nbody\n"),
        "bad_quoted_printable": crlf(head + "Content-Type: text/html\nContent-Transfer-Encoding: quoted-printable\n\n<p>=ZZ=\n=4</p>\n"),
        "message_rfc822_broken": crlf(head + 'Content-Type: multipart/mixed; boundary="b"\n\n--b\nContent-Type: message/rfc822\n\nnot a message at all\x01\n--b--\n'),
        "huge_header_count": crlf(head + "".join(f"X-H{i}: v\n" for i in range(2000)) + "\nbody\n"),
        "lone_cr_and_lf": b"From: a@example.com\r\nTo: " + to.encode() + b"\r\nSubject: mixed\rline\nendings\r\n\r\nbody\rmore\r\n",
    }
