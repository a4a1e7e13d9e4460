"""What an operator sees, in a real browser (headless Chromium): the admin's home, the
dead-letter list, a dead letter's case file, and the API docs. The screenshots are kept
under var/screenshots/ as test artefacts (not in git)."""
import shutil
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from tests.helpers import ROOT, headless_chromium, make_mailbox, make_operations_scene, wait_until

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER),
                                reason="needs Debian's chromium and chromium-driver (make test installs them as root)")
SHOTS = ROOT / "var" / "screenshots"
WIDTH = 1280


@pytest.fixture(autouse=True)
def static_names_the_live_server_finds(settings):
    """pytest-django's live server serves /static/ from the apps' own folders, which hold no
    hashed names; production's manifest names are tested through whitenoise
    (tests/inbox/test_pages.py)."""
    settings.STORAGES = {**settings.STORAGES,
                         "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}


@pytest.fixture(scope="module")
def chromium():
    """One browser for the module: starting Chromium costs more than most tests here."""
    driver = headless_chromium(WIDTH)
    SHOTS.mkdir(parents=True, exist_ok=True)
    yield driver
    driver.quit()


@pytest.fixture
def browser(chromium, live_server):
    """The module's browser, as a new one finds the site: no cookie of an earlier test."""
    yield chromium
    chromium.get(f"{live_server.url}/healthz")
    chromium.delete_all_cookies()
    assert chromium.get_cookies() == []


def shot(browser, name: str) -> None:
    browser.save_screenshot(str(SHOTS / f"{name}.png"))


def text_of(browser) -> str:
    """The page's text; "" while a page is being replaced (its old body gone stale), so a
    wait that polls this waits for the new page instead of failing on the old one."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    try:
        return browser.find_element(By.TAG_NAME, "body").text
    except StaleElementReferenceException:
        return ""


@pytest.fixture
def operator(browser, live_server, transactional_db):
    """A superuser logged in through the login form."""
    from selenium.webdriver.common.by import By

    User.objects.create_superuser("operator", "op@example.com", "a-long-operator-password")
    browser.get(f"{live_server.url}/admin/login/")
    browser.find_element(By.NAME, "username").send_keys("operator")
    browser.find_element(By.NAME, "password").send_keys("a-long-operator-password")
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    wait_until(lambda: "How Relay is doing" in browser.title, timeout=10, message="the admin home")
    return live_server


def test_the_admin_home_leads_to_dead_letters(browser, operator):
    shot(browser, "admin-home")
    body = text_of(browser)
    assert "Relay administration" in body and "Cleanups and dead letters" in body and "Mailboxes" in body


@pytest.fixture
def fresh_state(settings):
    """The first screen reads the database on every load (its cache is off)."""
    settings.RELAY_METRICS_CACHE_SECONDS = 0


def test_the_first_screen_shows_the_systems_numbers_and_the_last_hours_chart(browser, fresh_state, operator):
    from selenium.webdriver.common.by import By

    expected = make_operations_scene()
    browser.get(f"{operator.url}/admin/")
    shot(browser, "admin-first-screen")
    figures = {item.find_element(By.CLASS_NAME, "label").text: item.find_element(By.CLASS_NAME, "value").text
               for item in browser.find_elements(By.CSS_SELECTOR, ".relay-figures li")}
    assert figures == {
        "Active mailboxes": str(expected["active"]), "Expired mailboxes": str(expected["expired"]),
        "Owed cleanups": str(expected["owed"]), "Oldest owed cleanup": "10 min",
        "Dead cleanups": str(expected["dead"]), "Dead webhook deliveries": str(expected["dead_deliveries"]),
        "Failed mails": str(expected["failed_mails"]),
    }
    chart = browser.find_element(By.CSS_SELECTOR, ".relay-chart")
    assert f"{expected['done_last_hour']} done, {expected['dead']} dead" in chart.text
    # Two minutes had cleanups done (now, and twenty minutes ago), one had a dead one.
    assert len(chart.find_elements(By.CSS_SELECTOR, "rect.done")) == 2
    assert len(chart.find_elements(By.CSS_SELECTOR, "rect.dead")) == 1
    assert chart.size["height"] > 100 and chart.size["width"] >= 500  # drawn, not collapsed
    # Each figure opens its filtered list.
    browser.find_element(By.PARTIAL_LINK_TEXT, "Dead cleanups").click()
    wait_until(lambda: "dead@relay.localhost" in text_of(browser), timeout=10, message="the dead-letter list")
    assert "live0@relay.localhost" not in text_of(browser)
    browser.back()
    browser.find_element(By.PARTIAL_LINK_TEXT, "Owed cleanups").click()
    wait_until(lambda: "owed@relay.localhost" in text_of(browser), timeout=10, message="the owed list")
    assert "dead@relay.localhost" not in text_of(browser)


def test_the_dead_letter_list_shows_dead_letters_first_and_fits_the_window(browser, operator):
    now = timezone.now()
    make_mailbox("cleaned", status="expired", cleanup_state="done", cleanup_queued_at=now)
    make_mailbox("stuck", status="expired", cleanup_state="dead", cleanup_attempts=4, cleanup_queued_at=now
                 - timedelta(hours=1), cleanup_last_error="Stalwart answered HTTP 503 four times in a row, then gave up")
    browser.get(f"{operator.url}/admin/expiry/cleanup/")
    shot(browser, "admin-dead-letters")
    body = text_of(browser)
    assert body.index("stuck@relay.localhost") < body.index("cleaned@relay.localhost")
    assert "Stalwart answered HTTP 503" in body
    # No sideways scrolling, of the page or of the results table (the last column shows).
    assert browser.execute_script("return document.documentElement.scrollWidth") <= WIDTH
    assert browser.execute_script(
        "const r = document.querySelector('#changelist .results'); return r.scrollWidth <= r.clientWidth")


def test_a_dead_letter_is_a_case_file_with_a_retry_button(browser, operator):
    from selenium.webdriver.common.by import By

    stuck = make_mailbox("stuck", status="expired", cleanup_state="dead", cleanup_attempts=4,
                         cleanup_last_error="Stalwart rejected the credentials (HTTP 401)")
    browser.get(f"{operator.url}/admin/expiry/cleanup/{stuck.id}/change/")
    shot(browser, "admin-dead-letter")
    body = text_of(browser)
    assert "Stalwart rejected the credentials (HTTP 401)" in body and "stuck@relay.localhost" in body
    assert not browser.find_elements(By.CSS_SELECTOR, "a.deletelink, input[name=_save], input[name=_continue]")
    browser.find_element(By.XPATH, "//button[normalize-space()='Retry cleanup']").click()
    wait_until(lambda: "Cleanup queued again." in text_of(browser), timeout=10, message="the retry's message")
    shot(browser, "admin-dead-letter-retried")
    stuck.refresh_from_db()
    assert stuck.cleanup_state == "pending"


def test_the_api_docs_show_the_operations_and_authorize_offline(browser, live_server, transactional_db):
    from selenium.webdriver.common.by import By

    browser.get(f"{live_server.url}/api/docs/")
    wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, ".opblock"), timeout=20, message="Swagger UI")
    shot(browser, "api-docs")
    body = text_of(browser)
    assert "Create a mailbox" in body and "/api/v1/mailboxes/{mailbox_id}/renew" in body
    assert browser.find_elements(By.CSS_SELECTOR, "button.authorize")
    # Nothing came from another site: every script and stylesheet is Relay's own.
    sources = browser.execute_script(
        "return [...document.querySelectorAll('script[src], link[href]')].map(e => e.src || e.href)")
    assert sources and all(source.startswith(live_server.url) for source in sources)


def _mailed_link(email: str) -> tuple[str, str]:
    """The path and code an account's latest mail carries, as its reader sees them."""
    import re

    from relay.models import OutboxMail

    text = OutboxMail.objects.filter(to=[email]).latest("id").text
    path = re.search(r"https?://[^/\s]+(/(?:activate|recover)/[A-Za-z0-9_-]{86})", text).group(1)
    return path, re.search(r"\b(\d{5})\b", text).group(1)


def test_the_activation_page_activates_on_the_button_and_shows_the_key_once(browser, live_server, transactional_db):
    from selenium.webdriver.common.by import By

    from accounts.models import Account, ApiKey
    from relay.outbox.account_mail import account_sign_up

    account_sign_up(email="ann@example.com", login="ann")
    path, _ = _mailed_link("ann@example.com")
    browser.get(live_server.url + path)
    shot(browser, "activate-page")
    assert "Activate your Relay account" in browser.title and "ann" in text_of(browser)
    assert Account.objects.get(login="ann").status == "provisioned"  # opening it changed nothing
    assert not browser.find_elements(By.CSS_SELECTOR, "script[src]")  # no script from anywhere else
    browser.find_element(By.ID, "go").click()
    key = wait_until(lambda: browser.find_element(By.ID, "key").text, timeout=10, message="the key to show")
    shot(browser, "activate-done")
    assert key.startswith("rk_") and browser.find_element(By.ID, "copy").is_displayed()
    assert Account.objects.get(login="ann").status == "active"
    assert ApiKey.objects.filter(account__login="ann").count() == 1
    browser.get(live_server.url + path)  # the link a second time: used up, said plainly
    assert "cannot be used" in text_of(browser)


def test_the_recovery_page_takes_the_code_and_shows_a_new_key(browser, live_server, transactional_db):
    from selenium.webdriver.common.by import By

    from accounts.services import account_create_with_key
    from relay.outbox.account_mail import account_recovery_request

    account_create_with_key(login="bob", email="bob@example.com")
    account_recovery_request(email="bob@example.com")
    path, code = _mailed_link("bob@example.com")
    browser.get(live_server.url + path)
    wrong = f"{(int(code) + 1) % 100000:05d}"
    browser.find_element(By.ID, "code").send_keys(wrong)
    browser.find_element(By.ID, "go").click()
    wait_until(lambda: browser.find_element(By.ID, "error").text, timeout=10, message="the wrong code refused")
    assert "not right" in browser.find_element(By.ID, "error").text
    field = browser.find_element(By.ID, "code")
    field.clear()
    field.send_keys(code)
    browser.find_element(By.ID, "go").click()
    key = wait_until(lambda: browser.find_element(By.ID, "key").text, timeout=10, message="the new key to show")
    shot(browser, "recover-done")
    assert key.startswith("rk_")
