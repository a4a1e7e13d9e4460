"""The web inbox: (1) the mailbox page of a mailbox holding 1,000 messages against the API's
list of the same page (its newest 50), each timed from request to last byte over loopback,
alternating, in the same run, on one gunicorn web process; (2) from the `250` of a mail
sent over SMTP to its row drawn in headless Chromium's open mailbox page (a
MutationObserver in the page stamps each row), at `--rate` mails a second; and (3) a
screenshot of each page into docs/screenshots/ (the README and docs/inbox.md show them).

    scripts/bench.sh inbox [--requests 300] [--mails 100] [--rate 10] [--no-screenshots]
"""
import argparse
import smtplib
import statistics
import time
from email.message import EmailMessage

import requests

from bench.common import ROOT, command_line, fresh_database, record, spawn, wait_until

WEB, SMTP, SUBMISSION = 8766, 2766, 2767
SHOTS = ROOT / "docs" / "screenshots"
HOSTILE_HTML = ("<h2>Your order</h2><p>Confirm with the code <b>482913</b> or <a href='https://shop.example/confirm'>"
                "this link</a>.</p><img src='https://tracker.example/pixel.gif' alt='(a tracking pixel, blocked)'>")


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def mail(to: str, subject: str, html: str = "") -> EmailMessage:
    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = "Shop <orders@shop.example>", to, subject
    message.set_content("Your code is 482913.")
    if html:
        message.add_alternative(html, subtype="html")
    return message


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300, help="timed requests of each kind")
    parser.add_argument("--mails", type=int, default=100, help="mails sent while the browser watches")
    parser.add_argument("--rate", type=float, default=10, help="mails a second")
    parser.add_argument("--no-screenshots", action="store_true")
    args = parser.parse_args()
    fresh_database()
    from django.core.cache import cache

    cache.clear()  # no sign-ins counted against this address by an earlier run
    from accounts.services import account_create_with_key
    from mailboxes.lifecycle import mailbox_create
    from accounts.identity import Caller
    from mailboxes.messages import recipient_by_address
    from relay.backends import get_backend
    from relay.ingest import message_ingest
    from tests.helpers import headless_chromium

    owner, key = account_create_with_key(login="bench", plan="pro", email="bench@example.com")
    full, _ = mailbox_create(backend=get_backend(), caller=Caller(owner=owner), local_part="full", domain=None,
                             ttl_ms=3_600_000)
    recipient = recipient_by_address(full.address)
    for number in range(1000):
        message_ingest(raw=mail(full.address, f"Order {number}", HOSTILE_HTML).as_bytes(),
                       mail_from="orders@shop.example", recipients=[recipient])
    spawn("inbox-web", [".venv/bin/python", "-m", "gunicorn", "config.asgi", "-k", "core.serving.UvicornWorker",
                        "-w", "1", "-b", f"127.0.0.1:{WEB}"], env={"RELAY_SUBMISSION_PORT": str(SUBMISSION)},
          ready="Booting worker")
    spawn("inbox-smtp", [".venv/bin/python", "manage.py", "runsmtp", "--port", str(SMTP),
                         "--submission-port", str(SUBMISSION)], ready="SMTP listening")
    base = f"http://127.0.0.1:{WEB}"
    wait_until(lambda: ready(base), 60, "the web process")

    # (1) the page against the API's list, alternating.
    page = requests.Session()
    page.post(base + "/inbox/sign-in", data={"form": "key", "key": key,
                                             "csrfmiddlewaretoken": _csrf(page, base + "/inbox/sign-in")},
              headers={"Referer": base + "/inbox/sign-in"})
    api = requests.Session()
    api.headers["Authorization"] = f"Bearer {key}"
    timings = {"page": [], "api": []}
    for _ in range(10):  # warm both
        page.get(f"{base}/inbox/{full.id}"), api.get(f"{base}/api/v1/mailboxes/{full.id}/messages")
    for _ in range(args.requests):
        for name, session, url in (("page", page, f"{base}/inbox/{full.id}"),
                                   ("api", api, f"{base}/api/v1/mailboxes/{full.id}/messages")):
            started = time.perf_counter()
            response = session.get(url)
            timings[name].append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, (name, response.status_code)
    p50 = {name: statistics.median(values) for name, values in timings.items()}
    p99 = {name: percentile(values, 0.99) for name, values in timings.items()}
    print(f"mailbox page (1,000 messages, 50 shown): p50 {p50['page']:.1f} ms, p99 {p99['page']:.1f} ms; "
          f"API list: p50 {p50['api']:.1f} ms, p99 {p99['api']:.1f} ms; ratio p50 {p50['page'] / p50['api']:.2f}, "
          f"p99 {p99['page'] / p99['api']:.2f}")

    # (2) from the 250 to the row drawn.
    watched, _ = mailbox_create(backend=get_backend(), caller=Caller(owner=owner), local_part="watched", domain=None,
                                ttl_ms=3_600_000)
    driver = headless_chromium()
    driver.get(base + "/inbox/sign-in")
    driver.find_element("id", "key").send_keys(key)
    driver.find_element("id", "key").submit()
    wait_until(lambda: driver.current_url.endswith("/inbox/mailboxes"), 10, "signing in")
    driver.get(f"{base}/inbox/{watched.id}")
    driver.execute_script(
        "window.drawn = {}; new MutationObserver(() => document.querySelectorAll('#messages li[data-id]')"
        ".forEach(row => { const s = row.querySelector('.subject').textContent.trim().replace(/^Unread: /, '');"
        " if (!(s in window.drawn)) { window.drawn[s] = Date.now(); } }))"
        ".observe(document.getElementById('messages'), {childList: true, subtree: true});")
    time.sleep(1)  # the event stream connects
    answered = {}
    with smtplib.SMTP("127.0.0.1", SMTP, timeout=10) as smtp:
        start = time.monotonic()
        for number in range(args.mails):
            wait = start + number / args.rate - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            subject = f"Live {number}"
            smtp.send_message(mail(watched.address, subject))
            answered[subject] = time.time() * 1000
    drawn = wait_until(lambda: (found := driver.execute_script("return window.drawn")) and
                       len(found) >= args.mails and found, 30, "every row drawn")
    lags = [drawn[subject] - answered[subject] for subject in answered]
    print(f"250 to drawn, {args.mails} mails at {args.rate:g}/s: p50 {statistics.median(lags):.0f} ms, "
          f"p99 {percentile(lags, 0.99):.0f} ms, max {max(lags):.0f} ms")

    if not args.no_screenshots:
        screenshots(driver, base, full, key)
    driver.quit()
    record("inbox", command_line(),
           f"page p50 {p50['page']:.1f} / p99 {p99['page']:.1f} ms vs API list p50 {p50['api']:.1f} / p99 "
           f"{p99['api']:.1f} ms (×{p50['page'] / p50['api']:.2f} / ×{p99['page'] / p99['api']:.2f}); "
           f"250 to drawn at {args.rate:g}/s: p50 {statistics.median(lags):.0f} ms, "
           f"p99 {percentile(lags, 0.99):.0f} ms")


def ready(base: str) -> bool:
    """The web process answers /readyz; a first answer slower than the timeout (a loaded
    machine, the app still importing) is not ready yet rather than the end of the run."""
    try:
        return requests.get(base + "/readyz", timeout=2).ok
    except requests.RequestException:
        return False


def _csrf(session, url: str) -> str:
    session.get(url)
    return session.cookies["csrftoken"]


def screenshots(driver, base: str, full, key: str) -> None:
    """Each page as a person sees it, at 1280 and (the mailbox) 375 px wide."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    message = full.messages.order_by("-id").first()
    pages = {"mailbox": f"/inbox/{full.id}", "message": f"/inbox/{full.id}/{message.id}",
             "mailboxes": "/inbox/mailboxes", "sign-in": "/inbox/sign-in"}
    for name, path in pages.items():
        driver.get(base + path)
        time.sleep(0.5)  # the frame and fonts settle before the picture
        driver.save_screenshot(str(SHOTS / f"{name}.png"))
    sandbox_screenshot(driver, base, full.owner)
    driver.delete_all_cookies()
    driver.get(base + "/")
    driver.save_screenshot(str(SHOTS / "home.png"))
    driver.set_window_size(375, 800)
    driver.get(base + "/")
    driver.find_element("id", "get-address").click()
    time.sleep(0.5)
    driver.save_screenshot(str(SHOTS / "mailbox-375.png"))


def sandbox_screenshot(driver, base: str, owner) -> None:
    """A sandbox's page just after "New password" (the one time it is shown): its settings,
    a caught mail with a Bcc among its envelope recipients, and a fault rule."""
    from accounts.identity import Caller
    from mailboxes.faults import faults_set
    from mailboxes.lifecycle import mailbox_create
    from mailboxes.messages import recipient_by_address
    from relay.backends import get_backend
    from relay.ingest import message_ingest

    sandbox, _ = mailbox_create(backend=get_backend(), caller=Caller(owner=owner), local_part="staging", domain=None,
                                ttl_ms=3_600_000, sandbox=True)
    receipt = mail("alice@customer.example", "Your receipt #1042")
    message_ingest(raw=receipt.as_bytes(), mail_from="orders@shop.example",
                   recipients=[recipient_by_address(sandbox.address)],
                   rcpt_to=["alice@customer.example", "audit@shop.example"])
    faults_set(mailbox=sandbox, rules=[{"stage": "rcpt", "code": 451, "message": "Greylisted, try later",
                                        "match": "*@customer.example", "times": 2}])
    driver.set_window_size(1280, 2100)
    driver.get(f"{base}/inbox/{sandbox.id}")
    driver.find_element("id", "new-password").click()
    wait_until(lambda: driver.find_elements("id", "smtp-password"), 10, "the new password")
    driver.execute_script("document.querySelector('#snippet-django').open = true; window.scrollTo(0, 0)")
    time.sleep(0.5)
    driver.save_screenshot(str(SHOTS / "sandbox.png"))
    driver.set_window_size(1280, 900)


if __name__ == "__main__":
    main()
