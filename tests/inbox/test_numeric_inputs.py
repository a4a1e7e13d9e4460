"""Every number the web inbox takes (a query parameter, a form field) is ASCII digits within
bounds, or a 400 (a styled page): never a 500 for a digit `int()` refuses ("²" passes
`str.isdigit()`), nor a number past a bigint quietly read as 0."""
import pytest
from django.test import Client

from accounts.services import account_create_with_key
from mailboxes.models import Mailbox

MALFORMED = ["²", "٣", "1_000", "+7", "-1", "9" * 25]


def signed_in(login: str) -> Client:
    _account, key = account_create_with_key(login=login, email=f"{login}@example.com", plan="pro")
    browser = Client()
    assert browser.post("/inbox/sign-in", {"form": "key", "key": key}).status_code == 302
    return browser


def assert_problem_page(response, name: str) -> None:
    assert response.status_code == 400, (name, response.status_code)
    page = response.content.decode()
    assert 'class="problem"' in page and f"{name} must be a whole number" in page, page


@pytest.mark.parametrize("value", MALFORMED)
def test_a_malformed_after_on_the_event_stream_is_a_400(db, value):
    browser = Client()
    mailbox = Mailbox.objects.get(id=browser.post("/inbox/new")["Location"].rsplit("/", 1)[1])
    refused = browser.get(f"/inbox/{mailbox.id}/events", {"after": value})
    assert refused.status_code == 400 and "after must be a whole number" in refused.content.decode()
    resumed = browser.get(f"/inbox/{mailbox.id}/events", HTTP_LAST_EVENT_ID=value)
    assert resumed.status_code == 400 and "Last-Event-ID must be a whole number" in resumed.content.decode()


@pytest.mark.parametrize("value", MALFORMED)
def test_a_malformed_ttl_minutes_is_a_400_page(db, value):
    browser = signed_in("tina")
    refused = browser.post("/inbox/mailboxes", {"local_part": "shop", "ttl_minutes": value})
    assert_problem_page(refused, "ttl_minutes")
    assert not Mailbox.objects.exists()
    assert browser.post("/inbox/mailboxes", {"local_part": "shop", "ttl_minutes": "30"}).status_code == 302


@pytest.mark.parametrize("field", ["key", "application"])
@pytest.mark.parametrize("value", MALFORMED)
def test_a_malformed_key_or_application_to_revoke_is_a_400_page(db, field, value):
    assert_problem_page(signed_in("uma").post("/inbox/apps", {field: value}), field)

