"""The suite on both cores (`make test` runs pytest-xdist with `-n 2 --dist loadfile`): a
pytest plugin (pytest.ini loads it with `-p`) that keeps the xdist workers apart.

- PostgreSQL: pytest-django gives each worker its own test database (`test_relay_gw0`, …).
- Redis: each worker gets a Redis server of its own, started here before Django reads its
  settings, and CELERY_BROKER_URL points at it (the cache, the wake-ups and the revocations
  follow the broker). A shared server would not do even with a database each: publish and
  subscribe ignore the database number, so one worker's wake-ups would reach the other's
  waiters, and counts of subscriptions (`PUBSUB NUMPAT`) would add up both.
- Everything else a test starts (Cyrus, NSD, spamd, Chromium, SMTP servers, web processes)
  is under its own temp dir on free ports already. What one file shares with itself (the
  RabbitMQ queues of tests/expiry/test_workers_rabbitmq.py, the namespaces of tests/hosts.py)
  stays on one worker: `--dist loadfile` sends a file's tests to one worker.
- The order: the longest files first (below), so neither worker is left with a long file
  at the end while the other has nothing to do.

Without xdist (`scripts/test.sh tests/…`) this does nothing."""
import atexit
import os
import shutil
import subprocess
import tempfile
import time
from collections import OrderedDict
from pathlib import Path

import redis

from tests.ports import free_port


def _private_redis(worker: str) -> str:
    """A throwaway Redis for this worker, stopped when the worker exits; its URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("running the suite on several workers gives each its own Redis, and redis-server "
                           "was not found: install Redis, or run scripts/test.sh without -n")
    port, workdir = free_port(), tempfile.mkdtemp(prefix=f"relay-redis-{worker}-")
    server = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                               "--dir", workdir, "--logfile", os.path.join(workdir, "redis.log")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop() -> None:
        if server.poll() is None:
            server.terminate()
            server.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)

    _stops.append(stop)
    atexit.register(stop)  # also when the worker ends without unconfiguring
    deadline = time.monotonic() + 30
    while True:
        try:
            redis.Redis(host="127.0.0.1", port=port, socket_timeout=1).ping()
            break
        except redis.ConnectionError:
            if server.poll() is not None or time.monotonic() > deadline:
                log = Path(workdir, "redis.log")
                said = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
                raise RuntimeError(f"the Redis for xdist worker {worker} did not start on port {port}:\n{said}")
            time.sleep(0.05)
    return f"redis://127.0.0.1:{port}/15"


_stops = []


def pytest_unconfigure(config) -> None:
    for stop in _stops:
        stop()


_worker = os.environ.get("PYTEST_XDIST_WORKER")
if _worker:
    # Before pytest-django imports config.settings: the broker URL is read once, there.
    os.environ["CELERY_BROKER_URL"] = _private_redis(_worker)


# --- Which file goes first -------------------------------------------------------------------------
# `--dist loadfile` hands each worker a file at a time, most tests first; by time, a long
# file that starts late holds the whole run while the other worker has nothing left. This
# scheduler hands them out longest first instead, by the seconds each took in a whole run
# (tests/file_seconds.json, written by RELAY_TEST_FILE_SECONDS=tests/file_seconds.json make
# test; tests/slowest_files.py). A file not in it (a new one) is reckoned at the suite's
# mean seconds a test, times its tests. Only the order changes: a file still runs whole on
# one worker.
FILE_SECONDS = Path(__file__).with_name("file_seconds.json")


class LongestFirst(OrderedDict):
    """xdist's queue of files (path: {test id: done}), handing out the longest first."""

    def popitem(self, last: bool = True):
        if not hasattr(self, "estimates"):  # the first file asked for: the queue is complete
            import json

            known = json.loads(FILE_SECONDS.read_text()) if FILE_SECONDS.exists() else {}
            measured = [(seconds, len(self[path])) for path, seconds in known.items() if path in self]
            per_test = sum(s for s, _ in measured) / max(1, sum(n for _, n in measured)) if measured else 1.0
            self.estimates = {path: known.get(path, len(tests) * per_test) for path, tests in self.items()}
        path = max(self, key=lambda path: self.estimates.get(path, 0.0))
        return path, self.pop(path)


def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None  # xdist's own
    from xdist.scheduler import LoadFileScheduling

    scheduler = LoadFileScheduling(config, log)
    scheduler.workqueue = LongestFirst()
    return scheduler
