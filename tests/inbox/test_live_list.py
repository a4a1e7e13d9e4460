"""The mailbox page's live list (inbox.views.mailbox_events over relay.live) against the web
process's Django ASGI app served by uvicorn in the test process, so that the test counts
what a mail's arrival costs: the requests the page makes, and the times the mailbox is
opened (relay.reading.mailbox_open, watched as it runs)."""
import contextvars
import json
import shutil
import threading
from types import SimpleNamespace

import pytest
import requests
from django.core.handlers.asgi import ASGIHandler
from django.test import Client

from mailboxes.models import Mailbox
from relay import live, reading
from tests.helpers import deliver, free_port, wait_until

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
HOSTILE_HEADERS = (b'From: "<img src=x onerror=alert(1)>" <m@evil.test>\r\n'
                   b'Subject: <script>alert(2)</script> & "quoted" \'single\'\r\n\r\nYour code is 482913.\r\n')


# The path of the request being served, seen by the database calls it makes in the pool's
# threads too (asgiref carries context variables there).
SERVING: contextvars.ContextVar[str] = contextvars.ContextVar("serving", default="")


class Counted:
    """The ASGI app, noting the path of every HTTP request it is asked."""

    def __init__(self, app) -> None:
        self.app, self.paths = app, []

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            self.paths.append(scope["path"])
            SERVING.set(scope["path"])
        await self.app(scope, receive, send)


@pytest.fixture
def served(transactional_db, broker, monkeypatch):
    """The app on a free port; `paths` every request's, `opens` the request path of every
    opening of a mailbox."""
    import uvicorn
    from django.db import connections

    opens = []
    mailbox_open = reading.mailbox_open

    def counted_open(**kwargs):
        opens.append(SERVING.get())
        return mailbox_open(**kwargs)

    monkeypatch.setattr(reading, "mailbox_open", counted_open)
    # As in the web process (config/settings.py under ASGI): each request's thread closes
    # its connection when the request ends, so none outlives the server.
    monkeypatch.setitem(connections["default"].settings_dict, "CONN_MAX_AGE", 0)
    app = Counted(ASGIHandler())
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off", log_level="warning",
                                           timeout_graceful_shutdown=2))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, timeout=10, message="uvicorn")
    yield SimpleNamespace(base=f"http://127.0.0.1:{port}", paths=app.paths, opens=opens)
    # Streams end with their clients; the wake-up subscription ends once nobody waits.
    wait_until(lambda: live.hub.listener is None or live.hub.listener.done(), timeout=30,
               message="the wake-up subscription to end")
    server.should_exit = True
    thread.join(10)


def address_of(mailbox_id: str) -> str:
    return Mailbox.objects.get(id=mailbox_id).address


def anonymous_cookies() -> tuple[str, dict]:
    """(the mailbox's id, the cookies of the browser that made it) by the home page's button."""
    browser = Client()
    made = browser.post("/inbox/new")
    return made["Location"].rsplit("/", 1)[1], {name: morsel.value for name, morsel in browser.cookies.items()}


def events(stream: requests.Response):
    """(id, event, data) of each event a text/event-stream sends, as it comes."""
    fields = {}
    for line in stream.iter_lines(decode_unicode=True):
        if line == "" and "event" in fields:
            yield fields.get("id"), fields["event"], json.loads(fields["data"])
            fields = {}
        elif line and not line.startswith(":"):
            name, _, value = line.partition(": ")
            fields[name] = value


def test_a_mails_event_carries_its_row_drawn_by_the_template_with_the_senders_markup_as_text(served):
    mailbox_id, cookies = anonymous_cookies()
    url = f"{served.base}/inbox/{mailbox_id}/events?after=0"
    with requests.get(url, cookies=cookies, stream=True, timeout=30) as stream:
        assert stream.status_code == 200 and stream.headers["Content-Type"].startswith("text/event-stream")
        [message_id] = deliver(HOSTILE_HEADERS, address_of(mailbox_id))
        event_id, event, data = next(events(stream))
    assert (event, int(event_id), data["id"]) == ("message", message_id, message_id)
    row = data["row"]
    assert row.startswith(f'<li class="row unread" data-id="{message_id}">')
    assert f'href="/inbox/{mailbox_id}/{message_id}"' in row
    assert "<script>alert(2)" not in row and "<img src=x" not in row
    assert "&lt;script&gt;alert(2)&lt;/script&gt; &amp; &quot;quoted&quot; &#x27;single&#x27;" in row
    assert "&lt;img src=x onerror=alert(1)&gt;" in row
    assert '<code>482913</code>' in row and 'data-copy="482913"' in row


def test_a_strangers_event_stream_is_404_and_a_resumed_one_starts_after_its_last_event(served):
    mailbox_id, cookies = anonymous_cookies()
    assert requests.get(f"{served.base}/inbox/{mailbox_id}/events", timeout=10).status_code == 404
    first, second = (deliver(b"Subject: one\r\n\r\nhello\r\n", address_of(mailbox_id))[0],
                     deliver(b"Subject: two\r\n\r\nhello\r\n", address_of(mailbox_id))[0])
    # A reconnection's Last-Event-ID wins over the page's ?after=.
    with requests.get(f"{served.base}/inbox/{mailbox_id}/events?after=0", cookies=cookies, stream=True, timeout=30,
                      headers={"Last-Event-ID": str(first)}) as stream:
        event_id, event, data = next(events(stream))
    assert (event, int(event_id)) == ("message", second) and ">two<" in data["row"]


@pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER),
                    reason="needs Debian's chromium and chromium-driver (make test installs them)")
def test_a_mail_at_an_open_mailbox_page_costs_no_request_and_one_mailbox_open(served, broker):
    from tests.inbox.test_browser import element, elements, make_mailbox, new_browser

    driver = new_browser()
    try:
        page, address = make_mailbox(driver, served.base)
        # The stream is settled once its wake-up subscription is up and it has opened the
        # mailbox three times: as it started, at its first look, and at the look every new
        # subscription asks for.
        wait_until(lambda: broker.execute_command("PUBSUB", "NUMPAT") >= 1 and sum(
            path.endswith("/events") for path in served.opens) >= 3, timeout=30, message="the stream to settle")
        requests_before, opens_before = len(served.paths), len(served.opens)

        [message_id] = deliver(b"From: shop@example.com\r\nSubject: Your code\r\n\r\nYour code is 482913.\r\n",
                               address)
        wait_until(lambda: elements(driver, f'#messages li[data-id="{message_id}"]'), timeout=10,
                   message="the message's row drawn")
        assert element(driver, "#messages .chip code").text == "482913"
        assert served.paths[requests_before:] == [], "the page asked the server for more than the event"
        assert len(served.opens) - opens_before == 1, "the mail's arrival opened the mailbox more than once"
    finally:
        driver.quit()
