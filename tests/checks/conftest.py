import pytest

from tests.helpers import deliver


@pytest.fixture
def received(client_pro, box):
    """received(raw_for(address)) → the message id of that mail stored in `box`."""
    def store(build) -> int:
        return deliver(build(box["address"]), box["address"])[0]

    return store


@pytest.fixture
def checks_of(client_pro, box):
    """checks_of(message_id, kind) → the API's answer to GET …/checks/{kind}."""
    return lambda message_id, kind: client_pro.get(
        f"/api/v1/mailboxes/{box['id']}/messages/{message_id}/checks/{kind}")
