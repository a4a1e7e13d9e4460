"""No outside server holds the web tier (SECURITY.md, "Outside calls"), against a live ASGI
web process: while one account keeps agents' client ID documents dripping and a silent
spamd busy (and checks the HTML of a mail shaped to be slow to parse), another account's
reads answer at once; past a kind's threads the answer is 503 with Retry-After, at once."""
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlencode

import pytest
import requests

from accounts.services import account_create_with_key
from tests import mail_corpus
from tests.drip_server import DripServer, SilentServer, server_tls
from tests.helpers import answers, deliver, free_port, wait_until

pytestmark = pytest.mark.workers
SPAMD_SECONDS = 4  # the web process's spamd timeout
THREADS = 4  # its threads for each kind: spam checks, client ID documents
CALLS = 6  # of each kind at once: the shared pool's size on two cores


@pytest.fixture(scope="module")
def outside(module_processes, certificates):  # noqa: F811 (the fixture imported above)
    """A web process whose spamd never answers and which may fetch client ID documents from
    this machine, where they drip: (base URL, the drip server, the silent spamd)."""
    drip = DripServer(tls=server_tls(certificates), lasts=30)
    spamd = SilentServer()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    module_processes.web("outside-web", port, env={
        "RELAY_PUBLIC_URL": base, "RELAY_WEBHOOK_ALLOW_PRIVATE": "true",
        "RELAY_WEBHOOK_CA_FILE": str(certificates / "ca.pem"),
        "RELAY_SPAMD_URL": f"spamd://127.0.0.1:{spamd.port}", "RELAY_SPAMD_TIMEOUT_SECONDS": str(SPAMD_SECONDS),
        "RELAY_SPAMD_THREADS": str(THREADS), "RELAY_CLIENT_DOCUMENT_THREADS": str(THREADS),
        # The kinds' own threads are under test here, not the bound per account.
        "RELAY_SPAM_CHECKS_AT_ONCE": "50", "RELAY_SPAM_CHECKS_PER_MINUTE": "50"})
    module_processes.wait_ready()
    wait_until(lambda: answers(base + "/readyz", status=200), timeout=30, message="the web process")
    yield base, drip, spamd
    drip.stop()
    spamd.stop()


def signed_in(base: str, key: str) -> requests.Session:
    browser = requests.Session()
    browser.get(base + "/inbox/sign-in", timeout=10)
    answer = browser.post(base + "/inbox/sign-in", timeout=10, allow_redirects=False,
                          headers={"Referer": base + "/inbox/sign-in"},
                          data={"form": "key", "key": key, "csrfmiddlewaretoken": browser.cookies["csrftoken"]})
    assert answer.status_code == 302, answer.text[:2000]
    return browser


def consent_url(base: str, client_id: str) -> str:
    return base + "/oauth/authorize?" + urlencode({
        "response_type": "code", "client_id": client_id, "redirect_uri": "http://127.0.0.1:39999/callback",
        "scope": "mailboxes", "state": "s", "code_challenge": "x" * 43, "code_challenge_method": "S256",
        "resource": base + "/mcp"})


def test_another_accounts_read_answers_at_once_while_documents_drip_and_spamd_is_silent(outside, transactional_db,
                                                                                       broker):
    base, drip, spamd = outside
    _, mallory = account_create_with_key(login="mallory", email="mallory@example.com", plan="pro")
    _, olga = account_create_with_key(login="olga", email="olga@example.com", plan="pro")
    as_mallory, as_olga = {"Authorization": f"Bearer {mallory}"}, {"Authorization": f"Bearer {olga}"}
    box = requests.post(base + "/api/v1/mailboxes", json={}, headers=as_mallory, timeout=10).json()
    [message_id] = deliver(mail_corpus.plain(box["address"]), box["address"])
    # HTML shaped to take time squared in a parser that compares each attribute with the
    # element's others: its check is linear, and runs beside the rest like any read.
    attributes = " ".join(f"a{index}=1" for index in range(40_000))
    [shaped_id] = deliver(mail_corpus.mail(box["address"], "Shaped", "plain part",
                                           html=f'<div style="display:flex">x</div><p {attributes}>y</p>'),
                          box["address"])
    olgas = requests.post(base + "/api/v1/mailboxes", json={}, headers=as_olga, timeout=10).json()
    browser = signed_in(base, mallory)
    spam_url = f"{base}/api/v1/mailboxes/{box['id']}/messages/{message_id}/checks/spam"

    def timed(call, *args, **kwargs):
        started = time.monotonic()
        answer = call(*args, timeout=60, **kwargs)
        return answer, time.monotonic() - started

    with ThreadPoolExecutor(max_workers=2 * CALLS + 1) as pool:
        consents = [pool.submit(timed, browser.get, consent_url(base, f"https://localhost:{drip.port}/agent/{index}"),
                                allow_redirects=False) for index in range(CALLS)]
        spams = [pool.submit(timed, requests.get, spam_url, headers=as_mallory) for _ in range(CALLS)]
        # As many under way as the shared pool has threads: enough to take them all, were
        # these calls run there.
        wait_until(lambda: drip.connections + len(spamd.held) >= CALLS, timeout=15,
                   message="the documents' fetches and the spam checks to be under way")
        html_check = pool.submit(timed, requests.get, f"{base}/api/v1/mailboxes/{box['id']}/messages/{shaped_id}"
                                 "/checks/html", headers=as_mallory)
        read, elapsed = timed(requests.get, f"{base}/api/v1/mailboxes/{olgas['id']}", headers=as_olga)
        assert read.status_code == 200 and elapsed < 1, elapsed
        checked, seconds = html_check.result()
        assert checked.status_code == 200 and seconds < 5, (checked.status_code, seconds)
        assert "css-display-flex" in {feature["slug"] for feature in checked.json()["features"]}
        consents = [future.result() for future in consents]
        spams = [future.result() for future in spams]

    # Past a kind's threads: 503 at once, saying when to come back.
    refused = [(answer, seconds) for answer, seconds in spams + consents if "Retry-After" in answer.headers]
    assert len(refused) == 2 * (CALLS - THREADS), [(answer.status_code, seconds) for answer, seconds in spams + consents]
    assert all(answer.status_code == 503 and answer.json()["code"] == "backend_unavailable" and seconds < 1
               and answer.headers["Retry-After"].isdigit() for answer, seconds in refused)
    # Those that ran: spamd's silence is 503 backend_unavailable at its timeout; a document
    # not fetched in time leaves the client unknown (an error page, no consent form).
    ran = [(answer, seconds) for answer, seconds in spams + consents if "Retry-After" not in answer.headers]
    assert all(answer.status_code == 503 and SPAMD_SECONDS <= seconds < SPAMD_SECONDS + 2
               for answer, seconds in ran if answer.url == spam_url)
    assert all('id="consent"' not in answer.text and seconds < 5 + 2  # the documents' deadline, and a margin
               for answer, seconds in ran if answer.url != spam_url)
