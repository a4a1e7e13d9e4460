"""Verdicts on mail in (docs/api.md, "Verdicts"): SPF, DKIM and DMARC worked out at
ingest against the suite's own DNS server (NSD), for mail signed by an independent
signer (Perl's Mail::DKIM) and sent over real SMTP from loopback addresses the zone's
SPF records name, or do not."""
import smtplib
import threading
import time

import pytest

from mailboxes.models import Message
from mailboxes.messages import recipient_by_address
from relay.ingest import message_ingest
from tests import dkim_keys
from tests.helpers import listed
from tests.mail_corpus import mail, send


def signed(senders, domain: str, raw: bytes) -> bytes:
    return dkim_keys.sign(raw, domain, "sel", senders.keys[domain])


def deliver(smtp_server, box, raw: bytes, *, sender: str, source: str) -> None:
    assert send(smtp_server.port, box["address"], raw, sender=sender, source=source) == {}


def authentication(client, box) -> dict:
    """The newest message's verdict as the API shows it, and its list item's flag."""
    items = client.get(f"/api/v1/mailboxes/{box['id']}/messages").json()["results"]
    detail = client.get(f"/api/v1/mailboxes/{box['id']}/messages/{items[0]['id']}").json()
    assert items[0]["authenticated"] is (detail["authentication"]["verdict"] == "pass")
    return detail["authentication"]


def test_a_signed_mail_from_an_address_spf_names_passes_spf_dkim_and_dmarc(smtp_server, client_pro, box, senders):
    raw = signed(senders, "pass.test", mail(box["address"], "Your code", "123456", sender="noreply@pass.test"))
    deliver(smtp_server, box, raw, sender="bounce@pass.test", source=senders.listed)
    found = authentication(client_pro, box)
    assert found == {"spf": {"result": "pass", "domain": "pass.test"},
                     "dkim": [{"result": "pass", "domain": "pass.test", "selector": "sel"}],
                     "dmarc": {"result": "pass", "policy": "reject", "domain": "pass.test"}, "verdict": "pass"}
    stored = Message.objects.select_related("content").get(mailbox_id=box["id"])
    assert bytes(stored.content.raw) == raw  # the raw bytes stay exactly as received


def test_a_body_altered_after_signing_fails_dkim_and_dmarc_with_its_reject_policy(smtp_server, client_pro, box,
                                                                                  senders):
    raw = signed(senders, "pass.test", mail(box["address"], "Your code", "123456", sender="noreply@pass.test"))
    altered = raw.replace(b"123456", b"654321")
    deliver(smtp_server, box, altered, sender="bounce@pass.test", source=senders.unlisted)
    found = authentication(client_pro, box)
    assert found["spf"]["result"] == "fail"
    assert found["dkim"] == [{"result": "fail", "domain": "pass.test", "selector": "sel"}]
    assert found["dmarc"] == {"result": "fail", "policy": "reject", "domain": "pass.test"}
    assert found["verdict"] == "fail"


@pytest.mark.parametrize("domain, source, expected", [
    ("pass.test", "listed", "pass"), ("pass.test", "unlisted", "fail"), ("soft.test", "unlisted", "softfail"),
    ("soft.test", "listed", "pass"), ("unknown.test", "listed", "none"),
])
def test_spf_judges_the_connecting_address_against_the_envelope_senders_record(smtp_server, client_pro, box, senders,
                                                                               domain, source, expected):
    deliver(smtp_server, box, mail(box["address"], "Hi", "text", sender=f"someone@{domain}"),
            sender=f"someone@{domain}", source=getattr(senders, source))
    assert authentication(client_pro, box)["spf"] == {"result": expected, "domain": domain}


def test_dmarc_passes_by_dkim_alignment_whatever_the_envelope_sender(smtp_server, client_pro, box, senders):
    raw = signed(senders, "pass.test", mail(box["address"], "Your code", "123456", sender="noreply@pass.test"))
    deliver(smtp_server, box, raw, sender="bounces@soft.test", source=senders.unlisted)
    found = authentication(client_pro, box)
    assert found["spf"] == {"result": "softfail", "domain": "soft.test"}
    assert found["dmarc"]["result"] == "pass" and found["verdict"] == "pass"


def test_an_unsigned_mail_in_a_reject_domains_name_fails_dmarc(smtp_server, client_pro, box, senders):
    deliver(smtp_server, box, mail(box["address"], "Your code", "111111", sender="noreply@pass.test"),
            sender="attacker@soft.test", source=senders.listed)
    found = authentication(client_pro, box)
    assert found["spf"]["result"] == "pass" and found["dkim"] == []  # soft.test's SPF names 127.0.0.2
    assert found["dmarc"] == {"result": "fail", "policy": "reject", "domain": "pass.test"}
    assert found["verdict"] == "fail"


def test_without_a_dmarc_record_an_aligned_signature_passes_and_no_signature_is_none(smtp_server, client_pro,
                                                                                     new_box, senders):
    signed_box, unsigned_box = new_box(), new_box()
    raw = signed(senders, "nodmarc.test", mail(signed_box["address"], "Hi", "text", sender="news@nodmarc.test"))
    deliver(smtp_server, signed_box, raw, sender="bounce@elsewhere.test", source=senders.unlisted)
    found = authentication(client_pro, signed_box)
    assert found["dmarc"] == {"result": "none", "policy": None, "domain": "nodmarc.test"}
    assert found["dkim"][0]["result"] == "pass" and found["verdict"] == "pass"
    deliver(smtp_server, unsigned_box, mail(unsigned_box["address"], "Hi", "text", sender="news@nodmarc.test"),
            sender="bounce@elsewhere.test", source=senders.unlisted)
    assert authentication(client_pro, unsigned_box)["verdict"] == "none"


def test_the_authenticated_filter_and_wait_pass_over_a_forged_code(smtp_server, client_pro, box, senders):
    forged = mail(box["address"], "Your code", "111111", sender="noreply@pass.test")
    deliver(smtp_server, box, forged, sender="noreply@pass.test", source=senders.unlisted)
    url = f"/api/v1/mailboxes/{box['id']}/messages"
    assert client_pro.get(url, {"wait": 0, "authenticated": "true"}).json()["results"] == []
    real = signed(senders, "pass.test", mail(box["address"], "Your code", "222222", sender="noreply@pass.test"))
    deliver(smtp_server, box, real, sender="noreply@pass.test", source=senders.listed)
    assert len(listed(client_pro.get(url), "id")) == 2
    found = client_pro.get(url, {"wait": 1, "authenticated": "true"}).json()["results"]
    assert len(found) == 1
    detail = client_pro.get(f"{url}/{found[0]['id']}").json()
    assert detail["codes"] == ["222222"]
    assert client_pro.get(url, {"authenticated": "yes please"}).status_code == 400


def test_a_dns_server_that_does_not_answer_is_temperror_within_the_budget_and_other_sessions_go_on(
        silent_dns, smtp_server, client_pro, new_box, senders):
    slow_box, other_box = new_box(), new_box()
    took: dict = {}

    def slow_session():
        started = time.monotonic()
        deliver(smtp_server, slow_box, mail(slow_box["address"], "Hi", "text", sender="a@pass.test"),
                sender="a@pass.test", source=senders.listed)
        took["slow"] = time.monotonic() - started

    thread = threading.Thread(target=slow_session)
    thread.start()
    time.sleep(0.2)  # the slow session is in DATA, its verdict waiting on DNS
    started = time.monotonic()
    with smtplib.SMTP("127.0.0.1", smtp_server.port, timeout=10) as smtp:
        smtp.ehlo("other.test")
        smtp.mail("b@elsewhere.test")
        assert smtp.rcpt(other_box["address"])[0] == 250
        answered = time.monotonic() - started
    thread.join(10)
    assert answered < 0.5, f"another session's commands took {answered:.2f} s while a verdict waited on DNS"
    assert took["slow"] < 1.9, f"the 250 came {took['slow']:.2f} s after DATA; the budget is 1 s"
    found = authentication(client_pro, slow_box)
    assert found["spf"] == {"result": "temperror", "domain": "pass.test"}
    assert found["dmarc"]["result"] == "temperror" and found["verdict"] == "none"


def test_mail_read_from_a_mail_server_takes_spf_from_its_topmost_results_under_the_named_id_only(
        client_pro, new_box, senders, settings):
    settings.RELAY_AUTHSERV_ID = "mx.relay.test"
    body = mail("x@relay.localhost", "Hi", "text", sender="noreply@pass.test")
    ours = "Authentication-Results: mx.relay.test; spf=pass smtp.mailfrom=bounce@pass.test\r\n"
    cases = {
        "ours": (ours, "pass"),
        "another name": ("Authentication-Results: forger.test; spf=pass smtp.mailfrom=bounce@pass.test\r\n", "none"),
        # The server's own header has no SPF result; a lower one under its name is the sender's.
        "ours, below the server's": ("Authentication-Results: mx.relay.test; dkim=none\r\n" + ours, "none"),
        "ours, below another's": ("Authentication-Results: forger.test; spf=none\r\n" + ours, "none"),
        # It judged a sender other than the envelope sender the server recorded.
        "another sender": ("Authentication-Results: mx.relay.test; spf=pass smtp.mailfrom=x@other.test\r\n", "none"),
    }
    for case, (results, expected) in cases.items():
        box = new_box()
        message_ingest(raw=results.encode() + body, mail_from="bounce@pass.test",
                        recipients=[recipient_by_address(box["address"])], server_id=f"email-{box['id']}")
        found = authentication(client_pro, box)
        assert found["spf"]["result"] == expected, case
        assert found["verdict"] == ("pass" if expected == "pass" else "fail"), case  # pass.test's DMARC is p=reject


def test_without_a_named_id_no_authentication_results_is_taken(client_pro, box, senders, settings):
    settings.RELAY_AUTHSERV_ID = ""
    raw = (b"Authentication-Results: relay.localhost; spf=pass smtp.mailfrom=bounce@pass.test\r\n"
           + mail("x@relay.localhost", "Hi", "text", sender="noreply@pass.test"))
    message_ingest(raw=raw, mail_from="bounce@pass.test", recipients=[recipient_by_address(box["address"])],
                    server_id="email-unnamed")
    assert authentication(client_pro, box)["spf"]["result"] == "none"
