import pytest

from tests.helpers import deliver
from tests.ports import free_port


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


@pytest.fixture(scope="session")
def spamd_server(tmp_path_factory):
    from tests import spamd_server as server_module

    if not server_module.installed():
        pytest.skip("spamd is not installed (scripts/test.sh installs Debian's spamassassin)")
    server = server_module.SpamdServer(tmp_path_factory.mktemp("spamd"), free_port()).start()
    yield server
    server.stop()
