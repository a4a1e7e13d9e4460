"""GET …/checks/headers: one-click unsubscribe, Message-ID, Date and DKIM alignment, judged on
the message as received (DKIM by Relay's own verdict)."""
from tests import dkim_keys, mail_corpus
from tests.helpers import deliver


def by_name(response) -> dict:
    assert response.status_code == 200
    return {check["name"]: check for check in response.json()["checks"]}


def test_an_unsigned_newsletter(received, checks_of):
    checks = by_name(checks_of(received(mail_corpus.newsletter), "headers"))
    assert list(checks) == ["list_unsubscribe", "one_click_unsubscribe", "message_id", "date", "dkim_aligned"]
    assert checks["list_unsubscribe"]["ok"] and "https://shop.example.com/unsubscribe?u=1" in \
        checks["list_unsubscribe"]["detail"]
    # RFC 8058: one-click needs both headers under a valid DKIM signature, which this lacks.
    assert not checks["one_click_unsubscribe"]["ok"] and "DKIM" in checks["one_click_unsubscribe"]["detail"]
    assert checks["message_id"]["ok"] and checks["date"]["ok"]
    assert not checks["dkim_aligned"]["ok"] and checks["dkim_aligned"]["detail"] == "No valid DKIM signature."


def test_a_bare_mail_misses_everything(received, checks_of):
    raw = mail_corpus.crlf("From: a@example.com\nTo: {to}\nSubject: bare\nList-Unsubscribe: http://x.example/u\n"
                           "List-Unsubscribe-Post: yes\n\nhi\n")
    checks = by_name(checks_of(received(lambda to: raw.replace(b"{to}", to.encode())), "headers"))
    assert not any(check["ok"] for check in checks.values())
    assert "no <https:" in checks["list_unsubscribe"]["detail"]
    assert "not 'List-Unsubscribe=One-Click'" in checks["one_click_unsubscribe"]["detail"]
    assert checks["message_id"]["detail"] == "No Message-ID header."
    assert checks["date"]["detail"] == "No Date header."


def newsletter_from_pass_test(box) -> bytes:
    return mail_corpus.newsletter(box["address"]).replace(b"news@shop.example.com", b"news@pass.test")


def test_a_newsletter_signed_over_its_unsubscribe_headers_passes_every_check(client_pro, box, senders):
    signed = dkim_keys.sign(newsletter_from_pass_test(box), "pass.test", "sel", senders.keys["pass.test"],
                            headers="from:to:subject:date:message-id:list-unsubscribe:list-unsubscribe-post")
    message_id = deliver(signed, box["address"], mail_from="news@pass.test")[0]
    checks = by_name(client_pro.get(f"/api/v1/mailboxes/{box['id']}/messages/{message_id}/checks/headers"))
    assert all(check["ok"] for check in checks.values()), checks


def test_one_click_needs_the_signature_to_cover_the_unsubscribe_headers(client_pro, box, senders):
    signed = dkim_keys.sign(newsletter_from_pass_test(box), "pass.test", "sel", senders.keys["pass.test"])
    message_id = deliver(signed, box["address"], mail_from="news@pass.test")[0]
    checks = by_name(client_pro.get(f"/api/v1/mailboxes/{box['id']}/messages/{message_id}/checks/headers"))
    assert checks["dkim_aligned"]["ok"]
    assert not checks["one_click_unsubscribe"]["ok"] and "covered by a valid DKIM" in \
        checks["one_click_unsubscribe"]["detail"]


def test_a_signature_of_another_domain_is_not_aligned(client_pro, box, senders):
    signed = dkim_keys.sign(mail_corpus.newsletter(box["address"]), "nodmarc.test", "sel",
                            senders.keys["nodmarc.test"])
    message_id = deliver(signed, box["address"], mail_from="news@shop.example.com")[0]
    checks = by_name(client_pro.get(f"/api/v1/mailboxes/{box['id']}/messages/{message_id}/checks/headers"))
    assert not checks["dkim_aligned"]["ok"]
    assert checks["dkim_aligned"]["detail"] == ("Valid DKIM signatures only by nodmarc.test, not aligned with From "
                                                "(shop.example.com).")
