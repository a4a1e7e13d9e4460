"""Each account's bounds on the checks that call outside (docs/checks.md, "Bounds"): so
many link checks under way and started a minute, so many spam checks at once and a
minute; past them 429 with Retry-After, and another account unaffected."""
import threading
import time

import pytest

from accounts.services import account_create_with_key
from checks import message_checks
from mailboxes.errors import RateLimited
from tests import mail_corpus
from tests.drip_server import SilentServer
from tests.helpers import create_mailbox, deliver, make_mailbox, wait_until


def links_of(*paths: str):
    return lambda to: mail_corpus.newsletter(to, links=[f"https://shop.example.com/{path}" for path in paths])


def start(client, box, message_id: int):
    return client.post(f"/api/v1/mailboxes/{box['id']}/messages/{message_id}/checks/links")


@pytest.fixture
def silent_spamd(settings):
    spamd = SilentServer()
    settings.RELAY_SPAMD_URL = f"spamd://127.0.0.1:{spamd.port}"
    settings.RELAY_SPAMD_TIMEOUT_SECONDS = 2
    yield spamd
    spamd.stop()


def test_an_account_has_at_most_so_many_link_checks_under_way(client_pro, box, received, make_client, settings):
    settings.RELAY_LINK_CHECKS_AT_ONCE = 2
    first, second, third = (received(links_of(str(index))) for index in range(3))
    assert start(client_pro, box, first).status_code == 202
    assert start(client_pro, box, second).status_code == 202
    assert start(client_pro, box, first).status_code == 202  # the one under way: nothing new
    refused = start(client_pro, box, third)
    assert refused.status_code == 429 and refused.json()["code"] == "rate_limited"
    assert int(refused["Retry-After"]) >= 1
    # Another account's checks are its own.
    other = make_client("bob")
    other_box = create_mailbox(other)
    [theirs] = deliver(links_of("x")(other_box["address"]), other_box["address"])
    assert start(other, other_box, theirs).status_code == 202


def test_an_account_starts_so_many_link_checks_a_minute(client_pro, box, received, settings):
    from checks.models import LinkCheck

    settings.RELAY_LINK_CHECKS_PER_MINUTE = 2
    message_id = received(links_of("a"))
    for _ in range(2):
        assert start(client_pro, box, message_id).status_code == 202
        LinkCheck.objects.filter(message_id=message_id).update(status=LinkCheck.Status.DONE)  # as its task would
    refused = start(client_pro, box, message_id)
    assert refused.status_code == 429 and 1 <= int(refused["Retry-After"]) <= 60


def test_an_account_has_at_most_so_many_spam_checks_at_once(transactional_db, silent_spamd, settings):
    settings.RELAY_SPAM_CHECKS_AT_ONCE = 2
    account, _ = account_create_with_key(login="spammy", plan="pro")
    mailbox = make_mailbox("spammy", owner=account)
    outcomes: list[str] = []

    def check() -> None:
        try:
            message_checks.spam_check(mailbox=mailbox, raw=b"Subject: hi\r\n\r\nhello\r\n")
        except RateLimited:
            outcomes.append("refused")
        except Exception as exc:  # spamd's silence: SpamdUnavailable, after its timeout
            outcomes.append(type(exc).__name__)

    holding = [threading.Thread(target=check) for _ in range(2)]
    for thread in holding:
        thread.start()
    wait_until(lambda: len(silent_spamd.held) == 2, timeout=5, message="two checks waiting on spamd")
    started = time.monotonic()
    check()
    assert outcomes == ["refused"] and time.monotonic() - started < 1
    for thread in holding:
        thread.join(10)
    assert sorted(outcomes) == ["SpamdUnavailable", "SpamdUnavailable", "refused"]


def test_an_account_starts_so_many_spam_checks_a_minute(received, checks_of, silent_spamd, settings):
    settings.RELAY_SPAM_CHECKS_PER_MINUTE = 1
    settings.RELAY_SPAMD_TIMEOUT_SECONDS = 1
    message_id = received(mail_corpus.plain)
    assert checks_of(message_id, "spam").status_code == 503  # spamd's silence
    refused = checks_of(message_id, "spam")
    assert refused.status_code == 429 and refused.json()["code"] == "rate_limited"

