"""A sandbox's page in the web inbox through Django's test client (tests/inbox/test_sandbox_browser.py
drives it in a real browser with real mail): made from the home page or the account's form,
its SMTP password shown once then never, rotated; snippets with the real values; each row's
envelope recipients and the `rcpt` filter; the fault editor (add, refuse with the field
named, remove, clear) behind CSRF; and nobody else's."""
import re
from datetime import timedelta
from html import unescape

import pytest
from django.test import Client
from django.utils import timezone

from accounts import identity
from accounts.services import account_create_with_key
from mailboxes.faults import RULES_MAX, fault_answer, fault_rules_of, faults_get, faults_set
from mailboxes.messages import recipient_by_address
from mailboxes.models import FaultRule, Mailbox
from relay.ingest import message_ingest

CAUGHT = (b"From: Shop <shop@staging.example>\r\nTo: Alice <alice@customer.example>\r\n"
          b"Cc: bob@customer.example\r\nSubject: Your receipt\r\n\r\nThanks\r\n")


@pytest.fixture(autouse=True)
def submission_port(settings):
    settings.RELAY_SUBMISSION_PORT = 2587
    settings.RELAY_SMTP_PUBLIC_HOST = "smtp.relay.test"
    settings.RELAY_SMTP_TLS_CERT = "/etc/relay/smtp.pem"  # only read by the SMTP process: STARTTLS offered


def new_sandbox(browser: Client, **fields) -> tuple[Mailbox, str]:
    """(the sandbox, its page's HTML) made by the home page's second button; the page is the
    redirect's, the one that shows the password."""
    made = browser.post("/inbox/new", {"sandbox": "1", **fields})
    assert made.status_code == 302 and made["Location"].endswith("#smtp"), made
    sandbox = Mailbox.objects.get(id=made["Location"].split("#")[0].rsplit("/", 1)[1])
    return sandbox, browser.get(made["Location"].split("#")[0]).content.decode()


def shown_password(page: str) -> str | None:
    found = re.search(r'<code id="smtp-password">([^<]+)</code>', page)
    return unescape(found.group(1)) if found else None


def signed_in(login: str) -> tuple[Client, object]:
    account, key = account_create_with_key(login=login, email=f"{login}@example.com", plan="pro")
    browser = Client()
    assert browser.post("/inbox/sign-in", {"form": "key", "key": key}).status_code == 302
    return browser, account


def test_a_sandbox_made_from_the_home_page_shows_its_password_once_with_every_snippet_filled_in(db):
    browser = Client()
    assert 'id="get-sandbox"' in browser.get("/").content.decode()
    made = browser.post("/inbox/new", {"sandbox": "1"})
    cookie = made.cookies["relay_smtp_once"]
    assert cookie["httponly"] and cookie["samesite"] == "Strict" and cookie["path"].startswith("/inbox/")
    sandbox = Mailbox.objects.get(id=made["Location"].split("#")[0].rsplit("/", 1)[1])
    assert sandbox.sandbox and sandbox.owner is None
    page = browser.get(made["Location"].split("#")[0])
    assert page["Cache-Control"] == "no-store"
    assert page.cookies["relay_smtp_once"].value == "", "the page did not forget the password"
    html = page.content.decode()
    password = shown_password(html)
    assert password and identity.secret_digest(password) == sandbox.smtp_password_hash
    assert "This is the only time the password is shown" in html
    for expected in ('id="smtp-host">smtp.relay.test<', 'id="smtp-port">2587<',
                     f'id="smtp-username">{sandbox.address}<', 'id="smtp-security">STARTTLS<'):
        assert expected in html, expected
    text = unescape(html)
    for snippet in (f'EMAIL_HOST_PASSWORD = "{password}"', 'EMAIL_HOST = "smtp.relay.test"', "EMAIL_PORT = 2587",
                    f'EMAIL_HOST_USER = "{sandbox.address}"', "EMAIL_USE_TLS = True",
                    f'password: "{password}"', "enable_starttls: true", 'address: "smtp.relay.test"',
                    f'MAIL_PASSWORD="{password}"', "MAIL_PORT=2587", "MAIL_ENCRYPTION=tls",
                    f'auth: {{ user: "{sandbox.address}", pass: "{password}" }}', "requireTLS: true",
                    "nodemailer.createTransport({", f"spring.mail.password={password}",
                    "spring.mail.properties.mail.smtp.starttls.enable=true", "spring.mail.port=2587"):
        assert snippet in text, snippet

    again = browser.get(f"/inbox/{sandbox.id}").content.decode()
    assert password not in again and shown_password(again) is None, "the password was shown twice"
    assert 'id="smtp-password-hidden"' in again
    assert "EMAIL_HOST_PASSWORD = \"<shown once: press 'New password' for another>\"" in unescape(again)


def test_a_stale_or_forged_password_cookie_shows_nothing(db):
    browser = Client()
    sandbox, _ = new_sandbox(browser)
    other, _ = new_sandbox(browser)
    made = browser.post(f"/inbox/{sandbox.id}/smtp-password")
    carried = made.cookies["relay_smtp_once"].value
    browser.cookies["relay_smtp_once"] = carried  # sent to the other sandbox's page: not its password
    assert shown_password(browser.get(f"/inbox/{other.id}").content.decode()) is None
    browser.cookies["relay_smtp_once"] = carried[:-2] + ("AA" if not carried.endswith("AA") else "BB")
    assert shown_password(browser.get(f"/inbox/{sandbox.id}").content.decode()) is None
    browser.post(f"/inbox/{sandbox.id}/smtp-password")  # rotated again: the carried one is no longer its password
    browser.cookies["relay_smtp_once"] = carried
    assert shown_password(browser.get(f"/inbox/{sandbox.id}").content.decode()) is None


def test_new_password_rotates_and_shows_the_new_one_once(db):
    browser = Client()
    sandbox, first_page = new_sandbox(browser)
    first = shown_password(first_page)
    rotated = browser.post(f"/inbox/{sandbox.id}/smtp-password")
    assert rotated.status_code == 302 and rotated["Location"] == f"/inbox/{sandbox.id}#smtp"
    page = browser.get(f"/inbox/{sandbox.id}").content.decode()
    second = shown_password(page)
    sandbox.refresh_from_db()
    assert second and second != first and identity.secret_digest(second) == sandbox.smtp_password_hash
    assert f'EMAIL_HOST_PASSWORD = "{second}"' in unescape(page)
    assert shown_password(browser.get(f"/inbox/{sandbox.id}").content.decode()) is None


def test_an_account_makes_a_sandbox_with_the_form_and_nobody_else_sees_or_changes_it(db):
    owner, account = signed_in("sandra")
    form = owner.get("/inbox/mailboxes").content.decode()
    assert 'name="sandbox"' in form
    made = owner.post("/inbox/mailboxes", {"local_part": "staging", "sandbox": "1"})
    assert made.status_code == 302 and made["Location"].endswith("#smtp")
    sandbox = Mailbox.objects.get(owner=account)
    assert sandbox.sandbox and sandbox.address.startswith("staging@")
    assert shown_password(owner.get(f"/inbox/{sandbox.id}").content.decode())
    assert "SMTP sandbox" in owner.get("/inbox/mailboxes").content.decode()
    plain = owner.post("/inbox/mailboxes", {"local_part": "plain"})
    assert not Mailbox.objects.get(id=plain["Location"].rsplit("/", 1)[1]).sandbox

    digest = sandbox.smtp_password_hash
    faults_set(mailbox=sandbox, rules=[{"stage": "rcpt", "code": 451}])
    for stranger in (Client(), signed_in("other")[0]):
        assert stranger.get(f"/inbox/{sandbox.id}").status_code == 404
        assert stranger.post(f"/inbox/{sandbox.id}/smtp-password").status_code == 404
        assert stranger.post(f"/inbox/{sandbox.id}/faults", {"action": "clear"}).status_code == 404
        assert stranger.post(f"/inbox/{sandbox.id}/faults", {"action": "add", "stage": "mail", "code": "550"}
                             ).status_code == 404
    sandbox.refresh_from_db()
    assert sandbox.smtp_password_hash == digest and len(faults_get(mailbox=sandbox)) == 1


def test_a_mailbox_that_is_not_a_sandbox_has_no_smtp_settings_nor_faults(db):
    browser = Client()
    made = browser.post("/inbox/new")
    mailbox = Mailbox.objects.get(id=made["Location"].rsplit("/", 1)[1])
    assert "relay_smtp_once" not in made.cookies
    page = browser.get(f"/inbox/{mailbox.id}").content.decode()
    assert 'id="smtp"' not in page and 'id="faults"' not in page and 'name="rcpt"' not in page
    assert browser.post(f"/inbox/{mailbox.id}/faults", {"action": "clear"}).status_code == 404
    refused = browser.post(f"/inbox/{mailbox.id}/smtp-password")
    assert refused.status_code == 400 and "not a sandbox" in refused.content.decode()


def catch(sandbox: Mailbox, raw: bytes, *rcpt_to: str) -> int:
    """Store `raw` in the sandbox as the submission port does, with its envelope."""
    return message_ingest(raw=raw, mail_from="shop@staging.example", recipients=[recipient_by_address(sandbox.address)],
                          rcpt_to=list(rcpt_to))[0]


def test_each_row_names_its_envelope_recipients_a_bcc_marked_and_the_list_filters_by_one(db):
    browser = Client()
    sandbox, _ = new_sandbox(browser)
    receipt = catch(sandbox, CAUGHT, "alice@customer.example", "bob@customer.example", "audit@shop.example")
    other = catch(sandbox, CAUGHT.replace(b"Your receipt", b"Newsletter"), "carol@customer.example")
    page = browser.get(f"/inbox/{sandbox.id}").content.decode()
    row = re.search(rf'<li class="row unread" data-id="{receipt}">.*?</li>', page, re.S).group(0)
    recipients = re.findall(r'<a href="[^"]*\?rcpt=[^"]*"[^>]*>([^<]+)</a>( <span class="badge">Bcc</span>)?', row)
    assert recipients == [("alice@customer.example", ""), ("bob@customer.example", ""),
                          ("audit@shop.example", ' <span class="badge">Bcc</span>')]

    only_audit = browser.get(f"/inbox/{sandbox.id}", {"rcpt": "audit@shop.example"}).content.decode()
    assert f'data-id="{receipt}"' in only_audit and f'data-id="{other}"' not in only_audit
    assert "data-events" not in only_audit, "a filtered list went live"
    only_carol = browser.get(f"/inbox/{sandbox.id}", {"rcpt": "CAROL@customer.example"}).content.decode()
    assert f'data-id="{other}"' in only_carol and f'data-id="{receipt}"' not in only_carol
    nobody = browser.get(f"/inbox/{sandbox.id}", {"rcpt": "nobody@example.com"}).content.decode()
    assert "No message matches." in nobody
    refused = browser.get(f"/inbox/{sandbox.id}", {"rcpt": "a@b\r\nc"})
    assert refused.status_code == 400 and 'class="problem"' in refused.content.decode()

    message = browser.get(f"/inbox/{sandbox.id}/{receipt}").content.decode()
    envelope = re.search(r'<dd class="addresses" id="envelope">(.*?)</dd>', message, re.S).group(1)
    assert "shop@staging.example" in envelope and 'audit@shop.example <span class="badge">Bcc</span>' in envelope


def test_a_row_names_at_most_five_recipients_and_counts_the_rest(db):
    browser = Client()
    sandbox, _ = new_sandbox(browser)
    catch(sandbox, CAUGHT, *[f"user{number}@customer.example" for number in range(12)])
    page = browser.get(f"/inbox/{sandbox.id}").content.decode()
    assert "user4@customer.example" in page and "user5@customer.example" not in page
    assert "and 7 more" in page


def test_the_fault_editor_adds_lists_removes_and_clears_rules(db):
    browser = Client()
    sandbox, _ = new_sandbox(browser)
    added = browser.post(f"/inbox/{sandbox.id}/faults", {
        "action": "add", "stage": "rcpt", "code": "451", "message": "Try later", "match": "*@customer.example",
        "probability": "0.5", "times": "3", "delay_seconds": "1.5"})
    assert added.status_code == 302 and added["Location"] == f"/inbox/{sandbox.id}#faults"
    browser.post(f"/inbox/{sandbox.id}/faults", {"action": "add", "stage": "data", "code": "554"})
    first, second = faults_get(mailbox=sandbox)
    assert (first.stage, first.code, first.message, first.match, first.probability, first.times, first.remaining,
            first.delay_seconds) == ("rcpt", 451, "Try later", "*@customer.example", 0.5, 3, 3, 1.5)
    assert (second.stage, second.code, second.message, second.match, second.probability, second.times,
            second.delay_seconds) == ("data", 554, "", "", 1.0, None, 0.0)

    # One of the first rule's times spent by the submission port: the page says what is left.
    assert fault_answer(rules=fault_rules_of(sandbox.id), stage="data", address="x@y") is not None
    FaultRule.objects.filter(id=first.id).update(remaining=2)
    page = unescape(browser.get(f"/inbox/{sandbox.id}").content.decode())
    rules = re.findall(r'<li class="rule" data-stage="(\w+)" data-code="(\d+)">(.*?)</li>', page, re.S)
    assert [(stage, code) for stage, code, _ in rules] == [("rcpt", "451"), ("data", "554")]
    assert "2 of 3 left" in rules[0][2] and "Try later" in rules[0][2] and "*@customer.example" in rules[0][2]
    assert "0.5" in rules[0][2] and "1.5 s" in rules[0][2]
    assert "until removed" in rules[1][2] and "(the default)" in rules[1][2] and "any address" in rules[1][2]

    # A third rule keeps the first's count; removing the first moves the others up.
    browser.post(f"/inbox/{sandbox.id}/faults", {"action": "add", "stage": "mail", "code": "421"})
    assert [rule.remaining for rule in faults_get(mailbox=sandbox)] == [2, None, None]
    assert browser.post(f"/inbox/{sandbox.id}/faults", {"action": "remove", "rule": str(first.id)}).status_code == 302
    assert [(rule.position, rule.code) for rule in faults_get(mailbox=sandbox)] == [(0, 554), (1, 421)]
    # A rule gone already (replaced since, by the API) is nothing to remove.
    assert browser.post(f"/inbox/{sandbox.id}/faults", {"action": "remove", "rule": str(first.id)}).status_code == 302
    assert len(faults_get(mailbox=sandbox)) == 2
    assert browser.post(f"/inbox/{sandbox.id}/faults", {"action": "clear"}).status_code == 302
    assert faults_get(mailbox=sandbox) == []
    assert 'id="no-rules"' in browser.get(f"/inbox/{sandbox.id}").content.decode()


@pytest.mark.parametrize("field, value, says", [
    ("code", "600", "code must be a whole number from 400 to 599."),
    ("code", "", "code must be an SMTP reply code from 400 to 599."),
    ("code", "٤٥١", "code must be a whole number from 400 to 599."),
    ("stage", "quit", "stage must be one of auth, mail, rcpt, data."),
    ("probability", "2", "probability must be a number from 0 to 1."),
    ("probability", "half", "probability must be a number from 0 to 1."),
    ("times", "0", "times must be a whole number from 1 to 1000000."),
    ("delay_seconds", "31", "delay_seconds must be a number from 0 to 30."),
    ("delay_seconds", "nan", "delay_seconds must be a number from 0 to 30."),
    ("message", "two\r\nlines", "message must be one line of at most 200 printable characters."),
    ("match", "x" * 321, "match must be a glob of at most 320 characters on one line."),
])
def test_a_refused_rule_is_the_page_again_with_the_field_named_and_the_form_kept(db, field, value, says):
    browser = Client()
    sandbox, _ = new_sandbox(browser)
    form = {"action": "add", "stage": "rcpt", "code": "451", "match": "*@keep.example", field: value}
    refused = browser.post(f"/inbox/{sandbox.id}/faults", form)
    assert refused.status_code == 400
    page = refused.content.decode()
    assert re.search(r'<p class="problem" role="alert" id="rule-problem">([^<]*)</p>', page).group(1) == says
    field_id = {"delay_seconds": "rule-delay"}.get(field, f"rule-{field}")
    tag = re.search(rf'<(?:input|select) id="{field_id}"[^>]*>', page).group(0)
    assert 'aria-invalid="true"' in tag and "rule-problem" in tag
    if field != "match":
        assert 'value="*@keep.example"' in page, "the form lost what was typed"
    assert faults_get(mailbox=sandbox) == []
    assert f'id="faults" open' in page


def test_rules_stop_at_the_most_a_sandbox_holds_and_a_post_needs_its_csrf_token(db):
    browser = Client()
    sandbox, _ = new_sandbox(browser)
    faults_set(mailbox=sandbox, rules=[{"stage": "mail", "code": 450}] * RULES_MAX)
    refused = browser.post(f"/inbox/{sandbox.id}/faults", {"action": "add", "stage": "rcpt", "code": "451"})
    assert refused.status_code == 400 and f"at most {RULES_MAX} rules" in refused.content.decode()
    assert browser.post(f"/inbox/{sandbox.id}/faults", {"action": "dance"}).status_code == 400

    guarded = Client(enforce_csrf_checks=True)
    guarded.cookies = browser.cookies
    for path, form in ((f"/inbox/{sandbox.id}/faults", {"action": "clear"}), (f"/inbox/{sandbox.id}/smtp-password", {})):
        answer = guarded.post(path, form)
        assert answer.status_code == 403 and b"form has expired" in answer.content
    assert len(faults_get(mailbox=sandbox)) == RULES_MAX


def test_an_ended_sandbox_shows_no_password_and_takes_no_change(db):
    browser = Client()
    made = browser.post("/inbox/new", {"sandbox": "1"})
    sandbox = Mailbox.objects.get(id=made["Location"].split("#")[0].rsplit("/", 1)[1])
    Mailbox.objects.filter(id=sandbox.id).update(expires_at=timezone.now() - timedelta(seconds=1))
    page = browser.get(f"/inbox/{sandbox.id}").content.decode()
    assert 'id="ended"' in page and shown_password(page) is None
    assert 'id="new-password"' not in page and 'id="add-rule"' not in page
    assert browser.post(f"/inbox/{sandbox.id}/smtp-password").status_code == 410
    assert browser.post(f"/inbox/{sandbox.id}/faults", {"action": "clear"}).status_code == 410


def test_without_a_submission_port_the_page_says_so_and_offers_no_snippet(db, settings):
    settings.RELAY_SUBMISSION_PORT = 0
    sandbox, page = new_sandbox(Client())
    assert 'id="no-submission"' in page and 'id="snippet-django"' not in page


def test_without_a_certificate_the_page_and_its_snippets_say_starttls_is_not_offered(db, settings):
    settings.RELAY_SMTP_TLS_CERT = ""
    sandbox, page = new_sandbox(Client())
    text = unescape(page)
    assert 'id="smtp-security">none<' in page and 'id="no-tls"' in page
    for snippet in ("EMAIL_USE_TLS = False", "enable_starttls: false", "MAIL_ENCRYPTION=null", "ignoreTLS: true",
                    "spring.mail.properties.mail.smtp.starttls.enable=false"):
        assert snippet in text, snippet
    assert "EMAIL_USE_TLS = True" not in text and "requireTLS" not in text and " --tls " not in text
