"""A sandbox's page in a real browser (headless Chromium through Selenium) against the ASGI web
process and Relay's SMTP server with its submission port: a sandbox made from the home page,
its password read from the page and used by smtplib over STARTTLS with AUTH (a Bcc among the
recipients), the caught row drawn live with its envelope recipients, copy buttons, the
recipient filter, a new password, a 451 rule added by keyboard in the fault editor and met by
smtplib; axe-core, and a 375 px window."""
import shutil
import smtplib
import ssl
from email.message import EmailMessage

import pytest
import redis
from django.conf import settings as django_settings

from relay.inbound.submission import FAILURES_KEY
from tests.conftest import SmtpServerThread
from tests.helpers import free_port, wait_until
from tests.inbox.test_browser import AXE, element, elements, loaded, new_browser, press, run_axe

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = [pytest.mark.workers,
              pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER),
                                 reason="needs Debian's chromium and chromium-driver (make test installs them)"),
              pytest.mark.skipif(not AXE.exists(),
                                 reason="needs axe-core from npm (scripts/test.sh installs it into var/axe-core)")]


@pytest.fixture(scope="module")
def submission_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def web(module_processes, submission_port, certificates):
    """The web process, told the submission port the SMTP server below listens on and its
    certificate (the page shows the port, and STARTTLS)."""
    return module_processes.start_web("web-sandbox", env={
        "RELAY_SUBMISSION_PORT": str(submission_port), "RELAY_SMTP_TLS_CERT": str(certificates / "server.pem"),
        "RELAY_SMTP_TLS_KEY": str(certificates / "server.key")})


@pytest.fixture
def submission(transactional_db, broker, settings, certificates, submission_port):
    """Relay's SMTP server with its submission port, STARTTLS with the test's certificate; no
    failed AUTH counted for this host before or after."""
    settings.RELAY_SMTP_TLS_CERT = str(certificates / "server.pem")
    settings.RELAY_SMTP_TLS_KEY = str(certificates / "server.key")
    failures = redis.Redis.from_url(django_settings.RELAY_EVENTS_REDIS_URL)
    failures.delete(FAILURES_KEY + "127.0.0.1")
    server = SmtpServerThread(submission_port=submission_port).start()
    yield server
    server.stop()
    failures.delete(FAILURES_KEY + "127.0.0.1")
    failures.close()


@pytest.fixture
def tls(certificates) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(certificates / "ca.pem"))


def make_sandbox(driver, web) -> dict:
    """The home page's sandbox button pressed; the settings its page shows, this once."""
    driver.get(web + "/")
    element(driver, "#get-sandbox").click()
    wait_until(lambda: elements(driver, "#smtp-password") and loaded(driver), timeout=15,
               message="the new sandbox's page with its password")
    return {name: element(driver, f"#smtp-{name}").text for name in ("host", "port", "username", "password")}


def submit(settings: dict, tls: ssl.SSLContext, *, to: list[str], bcc: list[str] = (), subject: str) -> dict:
    """A mail sent as an app sends it: STARTTLS, AUTH, then the message (smtplib keeps a Bcc
    out of the headers and in the envelope). Returns smtplib's refused recipients."""
    mail = EmailMessage()
    mail["From"], mail["To"], mail["Subject"] = "Shop <shop@staging.example>", ", ".join(to), subject
    if bcc:
        mail["Bcc"] = ", ".join(bcc)
    mail.set_content("Thanks for your order.")
    with smtplib.SMTP(settings["host"], int(settings["port"]), timeout=30) as smtp:
        smtp.starttls(context=tls)
        smtp.login(settings["username"], settings["password"])
        return smtp.send_message(mail)


def row_recipients(driver) -> list[tuple[str, bool]]:
    """(address, shown as Bcc) of the newest row's envelope recipients."""
    return driver.execute_script(
        "return [...document.querySelectorAll('#messages li[data-id] .rcpt a')].map(a => [a.textContent,"
        " !!(a.nextElementSibling && a.nextElementSibling.matches('.badge') &&"
        " a.nextElementSibling.textContent === 'Bcc')])")


def test_a_sandbox_made_in_the_page_catches_what_smtplib_submits_and_its_fault_editor_refuses_as_told(
        web, submission, tls, submission_port):
    from selenium.webdriver.common.keys import Keys

    driver = new_browser()
    try:
        driver.execute_cdp_cmd("Browser.grantPermissions", {"permissions": ["clipboardReadWrite",
                                                                            "clipboardSanitizedWrite"]})
        settings = make_sandbox(driver, web)
        assert settings["host"] == "127.0.0.1" and settings["port"] == str(submission_port)
        assert settings["password"].startswith("rs_") and settings["username"] == element(driver, "#address").text
        assert element(driver, "#smtp-security").text == "STARTTLS"
        django_snippet = driver.execute_script("return document.querySelector('#snippet-django pre').textContent")
        assert f'EMAIL_HOST_PASSWORD = "{settings["password"]}"' in django_snippet
        assert run_axe(driver) == [], "the sandbox's page with its password"

        # A copy button puts the value on the clipboard and tells a screen reader so.
        element(driver, "#smtp dd:nth-of-type(4) button.copy").click()
        wait_until(lambda: element(driver, "#copy-status").get_attribute("textContent") == "Copied", timeout=5,
                   message="the copy announced")
        assert driver.execute_script("return navigator.clipboard.readText()") == settings["password"]

        # The app sends; the row appears without a reload, naming every envelope recipient.
        driver.execute_script("window.notReloaded = true")
        refused = submit(settings, tls, to=["alice@customer.example"], bcc=["audit@shop.example"],
                         subject="Your receipt")
        assert refused == {}
        wait_until(lambda: elements(driver, "#messages li[data-id] .rcpt"), timeout=15, message="the caught row")
        assert driver.execute_script("return window.notReloaded === true"), "the page reloaded"
        assert row_recipients(driver) == [["alice@customer.example", False], ["audit@shop.example", True]]

        # Reloaded, the password is gone for good; the list filters by a recipient.
        driver.refresh()
        wait_until(lambda: loaded(driver) and elements(driver, "#smtp-password-hidden"), timeout=10,
                   message="the page again")
        assert not elements(driver, "#smtp-password") and settings["password"] not in driver.page_source
        submit(settings, tls, to=["carol@customer.example"], subject="Newsletter")
        wait_until(lambda: len(elements(driver, "#messages li[data-id]")) == 2, timeout=15, message="the second row")
        element(driver, "#rcpt").send_keys("audit@shop.example", Keys.ENTER)
        wait_until(lambda: "rcpt=" in driver.current_url and loaded(driver), timeout=10, message="the filtered list")
        assert driver.execute_script("return [...document.querySelectorAll('#messages li[data-id] .subject')]"
                                     ".map(subject => subject.lastChild.textContent)") == ["Your receipt"]

        # A new password: shown once; the old one is refused at once, the new one taken.
        element(driver, "#new-password").click()
        wait_until(lambda: elements(driver, "#smtp-password") and loaded(driver), timeout=10,
                   message="the new password")
        rotated = {**settings, "password": element(driver, "#smtp-password").text}
        assert rotated["password"] != settings["password"]
        with pytest.raises(smtplib.SMTPAuthenticationError) as failed:
            submit(settings, tls, to=["alice@customer.example"], subject="With the old password")
        assert failed.value.smtp_code == 535
        assert submit(rotated, tls, to=["dave@customer.example"], subject="With the new one") == {}

        # A 451 at RCPT for the customers' addresses, added by keyboard alone.
        summary = element(driver, "#faults summary")
        driver.execute_script("arguments[0].focus()", summary)
        press(driver, Keys.ENTER)
        wait_until(lambda: element(driver, "#faults").get_attribute("open") is not None, timeout=5,
                   message="the fault editor open")
        press(driver, Keys.TAB)
        assert driver.execute_script("return document.activeElement.id") == "rule-stage"
        assert element(driver, "#rule-stage").get_attribute("value") == "rcpt"
        press(driver, Keys.TAB)
        assert driver.execute_script("return document.activeElement.id") == "rule-code"
        assert element(driver, "#rule-code").get_attribute("value") == "451"
        press(driver, Keys.TAB)
        press(driver, "Greylisted, try later")
        press(driver, Keys.TAB)
        press(driver, "*@customer.example" + Keys.ENTER)
        wait_until(lambda: loaded(driver) and elements(driver, "#faults li.rule"), timeout=10, message="the rule")
        rule = element(driver, "#faults li.rule")
        assert (rule.get_attribute("data-stage"), rule.get_attribute("data-code")) == ("rcpt", "451")
        assert "Greylisted, try later" in rule.text and "*@customer.example" in rule.text
        assert run_axe(driver) == [], "the sandbox's page with a rule and its rows"

        with pytest.raises(smtplib.SMTPRecipientsRefused) as refused_all:
            submit(rotated, tls, to=["erin@customer.example"], subject="Refused")
        code, text = refused_all.value.recipients["erin@customer.example"]
        assert code == 451 and b"Greylisted, try later" in text
        assert submit(rotated, tls, to=["ops@shop.example"], subject="Not matched") == {}

        # Removed, the rule answers no more.
        element(driver, "#faults li.rule button[type=submit]").click()
        wait_until(lambda: loaded(driver) and elements(driver, "#no-rules"), timeout=10, message="no rules")
        assert submit(rotated, tls, to=["erin@customer.example"], subject="Taken again") == {}
    finally:
        driver.quit()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_a_sandbox_page_fits_375_px_and_its_refused_rule_names_the_field(web, submission, tls, scheme):
    driver = new_browser(width=375)
    try:
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia",
                               {"features": [{"name": "prefers-color-scheme", "value": scheme}]})
        settings = make_sandbox(driver, web)
        submit(settings, tls, to=[f"customer{number}@a-rather-long-customer-domain.example" for number in range(7)],
               bcc=["audit@shop.example"], subject="A mail to many")
        wait_until(lambda: elements(driver, "#messages li[data-id] .rcpt"), timeout=15, message="the caught row")
        for snippet in elements(driver, "details.snippet"):
            driver.execute_script("arguments[0].open = true", snippet)
        element(driver, "#faults summary").click()
        element(driver, "#rule-code").clear()
        element(driver, "#rule-code").send_keys("999")
        element(driver, "#rule-match").send_keys("*@kept.example")
        element(driver, "#add-rule").click()
        wait_until(lambda: loaded(driver) and elements(driver, "#rule-problem"), timeout=10, message="the refusal")
        assert element(driver, "#rule-problem").text == "code must be a whole number from 400 to 599."
        assert element(driver, "#rule-code").get_attribute("aria-invalid") == "true"
        assert element(driver, "#rule-match").get_attribute("value") == "*@kept.example"
        wide = driver.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
        assert wide <= 0, f"the sandbox's page scrolls {wide} px sideways at 375 px ({scheme})"
        assert run_axe(driver) == [], f"the refused rule at 375 px ({scheme})"
    finally:
        driver.quit()
