"""relay.live's first message, MCP's waits, called directly (tests/api/test_wait.py drives the
routes over a real server): the first matching message, drawn by the door's own render,
marked read."""
import pytest

from accounts.identity import authenticate
from accounts.services import account_create_with_key
from api.authentication import Principal
from api.serializers import MessageDetailSerializer
from mailboxes.errors import NotFound
from mailboxes.models import Message
from relay.live import first_message
from relay.reading import search_checked
from tests.helpers import deliver, make_mailbox, run_async


def principal_of(key: str) -> Principal:
    caller = authenticate(key)
    return Principal(owner=caller.owner, mailbox_id=caller.mailbox_id, api_key_id=caller.api_key_id)


def first(caller, mailbox_id, **kwargs):
    return run_async(first_message(caller=caller, authenticate=lambda: caller, mailbox_id=mailbox_id, seconds=0,
                                   render=lambda message: MessageDetailSerializer(
                                       message, context={"base_url": "http://relay.test"}).data, **kwargs))


def test_first_message_skips_mail_without_a_code_and_answers_the_coded_one_whole(transactional_db):
    owner, key = account_create_with_key(login="waiter")
    caller = principal_of(key)
    mailbox = make_mailbox("first-message", owner=owner)
    deliver(b"Subject: hello\r\n\r\nno code here\r\n", mailbox.address)
    [coded] = deliver(b"Subject: your code\r\n\r\nYour verification code is 482913.\r\n", mailbox.address)

    found = first(caller, mailbox.id, search=search_checked(), with_code=True)
    assert found["id"] == coded and found["codes"] == ["482913"]
    assert found["attachments"] == [] and found["subject"] == "your code"
    assert Message.objects.get(id=coded).is_read
    assert first(caller, mailbox.id, search=search_checked(after=coded), with_code=True) is None


def test_first_message_refuses_a_stranger_as_the_route_does(transactional_db):
    owner, _ = account_create_with_key(login="holder")
    _, stranger_key = account_create_with_key(login="stranger")
    mailbox = make_mailbox("first-stranger", owner=owner)
    with pytest.raises(NotFound):
        first(principal_of(stranger_key), mailbox.id, search=search_checked())
