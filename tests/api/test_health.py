"""/healthz and /readyz (docs/architecture.md) on a real web process: ready when the database and
the broker answer, 503 naming the one that does not."""
import json
import urllib.error
import urllib.request

import pytest

from tests.helpers import free_port

pytestmark = pytest.mark.workers


def get(port: int, path: str) -> tuple[int, dict]:
    try:
        response = urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=15)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())
    return response.status, json.loads(response.read())


def test_ready_when_the_database_and_the_broker_answer(processes):
    port = free_port()
    processes.web("web", port)
    processes.wait_ready()
    assert get(port, "/healthz") == (200, {"status": "ok"})
    assert get(port, "/readyz") == (200, {"status": "ok", "checks": {"database": "ok", "broker": "ok"}})


@pytest.mark.parametrize("down", ["database", "broker"])
def test_not_ready_names_what_does_not_answer(processes, down):
    closed = free_port()  # nothing listens there
    env = ({"DATABASE_URL": f"postgres://postgres@127.0.0.1:{closed}/relay"} if down == "database"
           else {"CELERY_BROKER_URL": f"redis://127.0.0.1:{closed}/0", "CACHE_URL": "locmemcache://"})
    port = free_port()
    processes.web("web", port, env=env)
    processes.wait_ready()
    assert get(port, "/healthz")[0] == 200  # the process itself is up
    status, body = get(port, "/readyz")
    assert status == 503
    assert list(body["failing"]) == [down] and down in body["message"]
