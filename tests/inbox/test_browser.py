"""The web inbox in a real browser (headless Chromium through Selenium) against the ASGI web
process and Relay's SMTP server: a mailbox made from the home page, mail appearing without a
reload, a hostile mail that reaches nothing until asked, another browser, axe-core on every
page, and a 375 px window."""
import http.server
import shutil
import smtplib
import threading
import time
from email.message import EmailMessage

import pytest

from accounts.services import account_create_with_key
from tests.helpers import ROOT, free_port, headless_chromium, wait_until

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
AXE = ROOT / "var" / "axe-core" / "node_modules" / "axe-core" / "axe.min.js"
pytestmark = [pytest.mark.workers,
              pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER),
                                 reason="needs Debian's chromium and chromium-driver (make test installs them)")]


def new_browser(width: int = 1280):
    return headless_chromium(width)


@pytest.fixture(scope="module")
def web(module_processes):
    return module_processes.start_web("web")


@pytest.fixture
def browser(web, transactional_db, broker):
    driver = new_browser()
    yield driver
    driver.quit()


class Listener:
    """A loopback HTTP server that records every path a browser asks it for."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        listener = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (the standard library's name)
                listener.paths.append(self.path)
                self.send_response(200)
                self.send_header("Content-Type", "image/gif")
                self.end_headers()
                self.wfile.write(b"GIF89a\x01\x00\x01\x00\x00\x00\x00;")

            do_POST = do_GET  # noqa: N815

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def listener():
    found = Listener()
    yield found
    found.server.shutdown()


def element(driver, selector: str):
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, selector)


def elements(driver, selector: str):
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, selector)


def loaded(driver) -> bool:
    return driver.execute_script("return document.readyState") == "complete"


def make_mailbox(driver, web) -> tuple[str, str]:
    """(the mailbox page's URL, its address), made by the home page's button."""
    driver.get(web + "/")
    element(driver, "#get-address").click()
    wait_until(lambda: "/inbox/" in driver.current_url and elements(driver, "#address"), timeout=10,
               message="the new mailbox's page")
    return driver.current_url, element(driver, "#address").text


def send(smtp_server, to: str, *, subject: str, text: str = "", html: str = "") -> None:
    mail = EmailMessage()
    mail["From"], mail["To"], mail["Subject"] = "Shop <shop@example.com>", to, subject
    mail.set_content(text or "See the HTML part.")
    if html:
        mail.add_alternative(html, subtype="html")
    with smtplib.SMTP("127.0.0.1", smtp_server.port, timeout=10) as smtp:
        smtp.send_message(mail)


def test_a_mail_sent_over_smtp_appears_without_a_reload_with_its_code_and_its_html(browser, web, smtp_server):
    page, address = make_mailbox(browser, web)
    assert elements(browser, "#empty"), "the empty state is missing"
    browser.execute_script("window.notReloaded = true")
    send(smtp_server, address, subject="Your verification code", text="Your code is 482913.",
         html="<h1 id='greeting'>Welcome</h1><p>Your verification code is <b>482913</b>.</p>")
    sent_at = time.monotonic()
    wait_until(lambda: elements(browser, "#messages li[data-id]"), timeout=10, message="the message in the list")
    appeared = time.monotonic() - sent_at
    assert browser.execute_script("return window.notReloaded === true"), "the page reloaded"
    assert appeared < 5, f"the message took {appeared:.1f} s to appear"
    assert element(browser, "#messages .chip code").text == "482913"
    assert not elements(browser, "#empty")

    element(browser, "#messages li a.open").click()
    wait_until(lambda: elements(browser, "iframe#mail-html") and loaded(browser), timeout=10, message="the message")
    browser.switch_to.frame(element(browser, "iframe#mail-html"))
    wait_until(lambda: elements(browser, "#greeting"), timeout=10, message="the mail's HTML in its frame")
    assert element(browser, "#greeting").text == "Welcome"
    browser.switch_to.default_content()

    stranger = new_browser()
    try:
        stranger.get(page)
        assert address not in stranger.page_source and "Not found" in stranger.page_source
    finally:
        stranger.quit()


def test_a_hostile_mail_reaches_nothing_until_remote_images_are_asked_for_then_only_images(
        browser, web, smtp_server, listener):
    _, address = make_mailbox(browser, web)
    base = listener.base
    send(smtp_server, address, subject="Hostile", html=(
        f"<html><head><meta http-equiv='refresh' content='0;url={base}/refresh'>"
        f"<link rel='stylesheet' href='{base}/link.css'>"
        f"<style>@import url({base}/import.css); .bg {{ background: url({base}/background.png) }}</style></head>"
        f"<body onload=\"fetch('{base}/onload')\"><script>fetch('{base}/script')</script>"
        f"<div class='bg' id='hostile'>Hello</div><img id='pixel' src='{base}/pixel.gif'>"
        f"<form id='auto' action='{base}/form' method='post'><input name='a' value='1'></form>"
        f"<script>document.getElementById('auto').submit()</script>"
        f"<a id='top' href='{base}/top' target='_top'>open</a></body></html>"))
    wait_until(lambda: elements(browser, "#messages li a.open"), timeout=10, message="the hostile message")
    element(browser, "#messages li a.open").click()
    wait_until(lambda: elements(browser, "iframe#mail-html") and loaded(browser), timeout=10, message="the message")
    message_url = browser.current_url
    browser.switch_to.frame(element(browser, "iframe#mail-html"))
    wait_until(lambda: elements(browser, "#hostile") and loaded(browser), timeout=10, message="the mail's HTML")
    assert element(browser, "#top").get_attribute("target") == "_blank"
    browser.switch_to.default_content()
    assert listener.paths == [], f"the mail reached the network before it was asked: {listener.paths}"
    assert browser.current_url == message_url, "the mail navigated the page"

    element(browser, "#load-remote").click()
    wait_until(lambda: "remote=1" in browser.current_url and loaded(browser), timeout=10, message="remote images")
    browser.switch_to.frame(element(browser, "iframe#mail-html"))
    wait_until(lambda: "/pixel.gif" in listener.paths and "/background.png" in listener.paths, timeout=10,
               message="the remote images to load once asked")
    browser.switch_to.default_content()
    assert set(listener.paths) <= {"/pixel.gif", "/background.png"}, f"more than images: {listener.paths}"
    assert "remote=1" in browser.current_url and "/inbox/" in browser.current_url


def sign_in_code(email: str) -> str:
    import re

    from relay.models import OutboxMail

    return re.search(r"code: (\d{5})", OutboxMail.objects.filter(to=[email]).latest("id").text).group(1)


def test_sign_in_by_a_mailed_code_after_a_burnt_one_an_ended_mailbox_and_a_form_without_csrf(browser, web):
    from datetime import timedelta

    from django.utils import timezone

    from mailboxes.models import Mailbox

    account, _ = account_create_with_key(login="hana", email="hana@example.com", plan="pro")

    def ask_for_a_code():
        browser.get(web + "/inbox/sign-in")
        element(browser, "#email").send_keys("hana@example.com")
        element(browser, "#email").submit()
        wait_until(lambda: elements(browser, "#code"), timeout=10, message="the code form")

    def enter(code: str):
        element(browser, "#code").send_keys(code)
        element(browser, "#code").submit()
        wait_until(lambda: loaded(browser) and (elements(browser, "#problem")
                                                or "/inbox/mailboxes" in browser.current_url),
                   timeout=10, message="the answer to a code")

    ask_for_a_code()
    code = sign_in_code("hana@example.com")
    for attempt in range(5):
        enter(f"{(int(code) + 1 + attempt) % 100000:05d}")
        assert elements(browser, "#problem"), "a wrong code was taken"
    enter(code)
    assert "/inbox/mailboxes" not in browser.current_url, "the right code still worked after five wrong ones"
    ask_for_a_code()
    enter(sign_in_code("hana@example.com"))
    assert browser.current_url.endswith("/inbox/mailboxes") and "hana" in browser.page_source

    element(browser, "#local_part").send_keys("ending")
    element(browser, "#local_part").submit()
    wait_until(lambda: elements(browser, "#address"), timeout=10, message="the new mailbox")
    page = browser.current_url
    Mailbox.objects.filter(owner=account).update(expires_at=timezone.now() - timedelta(seconds=1))
    browser.get(page)
    assert elements(browser, "#ended") and not elements(browser, "form[action$='/renew']")

    browser.get(web + "/")
    browser.execute_script("document.querySelectorAll('input[name=csrfmiddlewaretoken]').forEach(e => e.remove())")
    element(browser, "#get-address").click()
    wait_until(lambda: loaded(browser) and "form has expired" in browser.page_source, timeout=10,
               message="the refusal of a form without its token")
    assert Mailbox.objects.filter(owner=None).count() == 0


PAGES = ("home", "mailbox", "message", "checks", "sign-in", "account", "delete", "not-found")


def visit(driver, web, smtp_server):
    """Each page of the inbox, in turn, as (name, url) once it has loaded."""
    _, key = account_create_with_key(login="axe", email="axe@example.com", plan="pro")
    page, address = make_mailbox(driver, web)
    send(smtp_server, address, subject="Your code", text="Your code is 482913.", html="<p>Code 482913</p>")
    wait_until(lambda: elements(driver, "#messages li a.open"), timeout=10, message="the message")
    yield "mailbox", page
    element(driver, "#messages li a.open").click()
    wait_until(lambda: elements(driver, "iframe#mail-html") and loaded(driver), timeout=10, message="the message")
    yield "message", driver.current_url
    driver.get(driver.current_url.split("?")[0] + "?tab=checks")
    wait_until(lambda: elements(driver, "#render-title") and loaded(driver), timeout=10, message="the checks")
    # the HTML check's and spamd's sections, fetched by the page's script once the page is shown
    wait_until(lambda: elements(driver, "#spam-title") and not elements(driver, "section[data-load]")
               and "Asking SpamAssassin" not in driver.page_source and "Checking its HTML" not in driver.page_source,
               timeout=15, message="the HTML check and spamd's answer in the page")
    yield "checks", driver.current_url
    driver.get(page + "/delete")
    yield "delete", driver.current_url
    driver.get(web + "/inbox/not-a-mailbox")
    yield "not-found", driver.current_url
    driver.get(web + "/")
    yield "home", driver.current_url
    driver.get(web + "/inbox/sign-in")
    yield "sign-in", driver.current_url
    element(driver, "#key").send_keys(key)
    element(driver, "#key").submit()
    wait_until(lambda: driver.current_url.endswith("/inbox/mailboxes") and loaded(driver), timeout=10,
               message="the account's page")
    yield "account", driver.current_url


@pytest.mark.skipif(not AXE.exists(), reason="needs axe-core from npm (scripts/test.sh installs it into var/axe-core)")
def test_axe_core_finds_no_serious_or_critical_violation_on_any_page(browser, web, smtp_server):
    source = AXE.read_text()
    seen = []
    for name, url in visit(browser, web, smtp_server):
        browser.execute_script(source)
        result = browser.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "axe.run(document, {resultTypes: ['violations']}).then(r => done(r.violations.map("
            "v => ({id: v.id, impact: v.impact, nodes: v.nodes.map(n => n.target.join(' '))}))));")
        bad = [violation for violation in result if violation["impact"] in ("serious", "critical")]
        assert bad == [], f"{name} ({url}): {bad}"
        seen.append(name)
    assert sorted(seen) == sorted(PAGES)


def test_no_page_scrolls_sideways_at_375_px_in_light_or_dark(web, transactional_db, broker, smtp_server):
    driver = new_browser(width=375)
    try:
        for scheme in ("light", "dark"):
            driver.execute_cdp_cmd("Emulation.setEmulatedMedia",
                                   {"features": [{"name": "prefers-color-scheme", "value": scheme}]})
            for name, url in visit(driver, web, smtp_server):
                wide = driver.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
                assert wide <= 0, f"{name} scrolls {wide} px sideways at 375 px ({scheme})"
                background = driver.execute_script("return getComputedStyle(document.body).backgroundColor")
                assert (background == "rgb(255, 255, 255)") == (scheme == "light"), f"{name} ignores {scheme}"
            driver.delete_all_cookies()
    finally:
        driver.quit()


def run_axe(driver) -> list:
    driver.execute_script(AXE.read_text())
    result = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document, {resultTypes: ['violations']}).then(r => done(r.violations.map("
        "v => ({id: v.id, impact: v.impact, nodes: v.nodes.map(n => n.target.join(' '))}))));")
    return [violation for violation in result if violation["impact"] in ("serious", "critical")]


def press(driver, keys: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(driver).send_keys(keys).perform()


def lines(driver, selector: str) -> int:
    """How many lines the text of `selector` takes."""
    return driver.execute_script(
        "const range = document.createRange(); range.selectNodeContents(document.querySelector(arguments[0]));"
        "return new Set([...range.getClientRects()].map(box => Math.round(box.top))).size", selector)


def frame_height(driver) -> float:
    return driver.execute_script("return document.getElementById('mail-html').getBoundingClientRect().height")


LONG_HTML = ("<h1>Newsletter</h1><img src='{base}/banner.png' width='560' height='200' alt=''>"
             + "".join(f"<p>Paragraph {n}: the news of the week, told at some length so it wraps.</p>" for n in range(60)))


@pytest.mark.skipif(not AXE.exists(), reason="needs axe-core from npm (scripts/test.sh installs it into var/axe-core)")
@pytest.mark.parametrize("width", [1280, 375])
def test_a_message_reads_in_place_in_local_time_with_keys_a_sized_frame_and_held_images(
        width, web, transactional_db, broker, smtp_server, listener):
    from selenium.webdriver.common.keys import Keys

    driver = new_browser(width)
    try:
        driver.execute_cdp_cmd("Browser.grantPermissions", {"permissions": ["clipboardReadWrite",
                                                                            "clipboardSanitizedWrite"]})
        page, address = make_mailbox(driver, web)
        send(smtp_server, address, subject="Short one", text="Your code is 482913.", html="<p>Code 482913</p>")
        send(smtp_server, address, subject="Long one", html=LONG_HTML.format(base=listener.base))
        wait_until(lambda: len(elements(driver, "#messages li a.open")) == 2, timeout=10, message="both messages")

        # Times in the reader's words and zone, the server's UTC without script.
        time = element(driver, "#messages li time")
        assert "UTC" not in time.text and time.get_attribute("title"), time.text
        assert "UTC" in driver.execute_script("return document.querySelector('#messages li time').dateTime") \
            or time.get_attribute("datetime").endswith("+00:00")

        assert lines(driver, "#address") == 1, "the address breaks"

        # j moves down the list, Enter opens: the newest, the long one.
        press(driver, "j")
        assert driver.execute_script("return document.activeElement.matches('#messages li a.open')")
        press(driver, Keys.ENTER)
        wait_until(lambda: elements(driver, "iframe#mail-html") and loaded(driver), timeout=10, message="the message")
        assert "Long one" in element(driver, "h1").text
        assert lines(driver, ".meta dd.addresses:nth-of-type(2)") == 1, "the To address breaks"
        assert element(driver, "#verdict").text == element(driver, "#verdict").text.lower() in (
            "unverified", "verified sender")

        # The frame holds the whole long mail, the remote image a placeholder, nothing fetched.
        wait_until(lambda: frame_height(driver) > 1200, timeout=5, message=f"a tall frame, not {frame_height(driver)}")
        driver.switch_to.frame(element(driver, "iframe#mail-html"))
        wait_until(lambda: elements(driver, "img[data-held]") and loaded(driver), timeout=10, message="the mail")
        held = element(driver, "img[data-held]")
        assert driver.execute_script("return arguments[0].complete && arguments[0].naturalWidth > 0", held), \
            "the held image shows as broken"
        driver.switch_to.default_content()
        assert listener.paths == []

        # The mobile width, then back.
        if width > 375:
            element(driver, ".widths button[data-width='375']").click()
            assert element(driver, "iframe#mail-html").size["width"] <= 375
            element(driver, ".widths button[data-width='']").click()
            assert element(driver, "iframe#mail-html").size["width"] > 375

        # Tabs in place: one line of them, no reload, the address follows; back and reload keep it.
        tops = driver.execute_script("return [...document.querySelectorAll('#tabs li')].map(li => li.offsetTop)")
        assert len(set(tops)) == 1, f"the tabs wrap onto {len(set(tops))} lines"
        driver.execute_script("window.notReloaded = true")
        element(driver, "#tabs a[data-tab='headers']").click()
        wait_until(lambda: elements(driver, "table.headers"), timeout=10, message="the headers tab")
        assert driver.current_url.endswith("?tab=headers")
        assert element(driver, "#tabs a[data-tab='headers']").get_attribute("aria-current") == "page"
        driver.back()
        wait_until(lambda: elements(driver, "iframe#mail-html"), timeout=10, message="the HTML tab again")
        assert not elements(driver, "table.headers")
        assert driver.execute_script("return window.notReloaded === true"), "a tab reloaded the page"
        driver.forward()
        wait_until(lambda: elements(driver, "table.headers"), timeout=10, message="the headers tab again")
        driver.refresh()
        wait_until(lambda: loaded(driver) and elements(driver, "table.headers"), timeout=10, message="a reload")
        assert driver.execute_script("return document.documentElement.scrollWidth") <= width, driver.execute_script(
            "return [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > innerWidth)"
            ".slice(0, 8).map(e => e.tagName + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right))")

        # ? lists the keys in a dialog that holds focus; Esc closes it and focus returns.
        link = element(driver, "#tabs a[data-tab='text']")
        driver.execute_script("arguments[0].focus()", link)
        press(driver, "?")
        wait_until(lambda: element(driver, "#shortcuts").get_attribute("open") is not None, timeout=5,
                   message="the shortcuts dialog")
        for _ in range(3):
            assert driver.execute_script("return document.getElementById('shortcuts').contains(document.activeElement)")
            press(driver, Keys.TAB)
        assert run_axe(driver) == [], "with the shortcuts open"
        press(driver, Keys.ESCAPE)
        wait_until(lambda: element(driver, "#shortcuts").get_attribute("open") is None, timeout=5, message="closed")
        assert driver.execute_script("return document.activeElement === arguments[0]", link)

        # k: the newer message? This is the newest; j: the older one, whose frame is small.
        press(driver, "j")
        wait_until(lambda: "Short one" in element(driver, "h1").text and loaded(driver), timeout=10,
                   message="the older message")
        assert 150 < frame_height(driver) < 400, frame_height(driver)
        press(driver, "c")
        wait_until(lambda: element(driver, ".chip button.copy").text == "Copied", timeout=5, message="Copied")
        assert driver.execute_script("return navigator.clipboard.readText()") == "482913"
        assert run_axe(driver) == []
        press(driver, "k")
        wait_until(lambda: "Long one" in element(driver, "h1").text, timeout=10, message="the newer message")
    finally:
        driver.quit()


def test_new_mail_is_notified_while_the_page_is_hidden_once_the_person_asked(
        web, transactional_db, broker, smtp_server):
    driver = new_browser()
    try:
        page, address = make_mailbox(driver, web)
        notify = element(driver, "#notify")
        assert notify.is_displayed() and notify.get_attribute("aria-pressed") == "false"
        driver.execute_cdp_cmd("Browser.grantPermissions", {"origin": web, "permissions": ["notifications"]})
        # A headless browser shows no notification a test could see: this records each one
        # the page makes, and still makes it.
        driver.execute_script("window.shown = []; const Real = window.Notification;"
                              "window.Notification = new Proxy(Real, {construct(target, args) {"
                              "  window.shown.push(args[0]); return new target(...args); }});")
        send(smtp_server, address, subject="Seen while looking")
        wait_until(lambda: elements(driver, "#messages li[data-id]"), timeout=10, message="the first message")
        notify.click()
        wait_until(lambda: notify.get_attribute("aria-pressed") == "true", timeout=5, message="notifications on")
        assert driver.execute_script("return window.shown") == [], "a notification while the page was shown"

        # Another tab in front hides the mailbox's page; it says over a BroadcastChannel what it
        # drew and notified, since looking at it would show it again.
        driver.execute_script("const channel = new BroadcastChannel('test');"
                              "new MutationObserver(() => channel.postMessage({rows: document.querySelectorAll("
                              "'#messages li[data-id]').length, shown: window.shown, hidden: document.hidden}))"
                              ".observe(document.getElementById('messages'), {childList: true});")
        driver.switch_to.new_window("tab")
        driver.get(web + "/inbox/sign-in")
        driver.execute_script("window.heard = []; new BroadcastChannel('test').onmessage = e => heard.push(e.data);")
        send(smtp_server, address, subject="Arrived while away")
        wait_until(lambda: driver.execute_script("return window.heard.length"), timeout=10,
                   message="the second message drawn in the hidden page")
        heard = driver.execute_script("return window.heard")[-1]
        assert heard == {"rows": 2, "shown": ["Arrived while away"], "hidden": True}, heard
    finally:
        driver.quit()
