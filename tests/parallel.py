"""The suite on both cores (`make test` runs pytest-xdist with `-n 3 --dist loadfile`: three
workers, as the tests' own processes leave a core idle while they wait on them): a
pytest plugin (pytest.ini loads it with `-p`) that keeps the xdist workers apart.

- PostgreSQL: pytest-django gives each worker its own test database (`test_relay_gw0`, …).
- Redis: each worker gets a Redis server of its own, started here before Django reads its
  settings, and CELERY_BROKER_URL points at it (the cache, the wake-ups and the revocations
  follow the broker). A shared server would not do even with a database each: publish and
  subscribe ignore the database number, so one worker's wake-ups would reach the other's
  waiters, and counts of subscriptions (`PUBSUB NUMPAT`) would add up both.
- Migrations: the first worker migrates a template database once per run, and each
  worker's test database is made from it (`CREATE DATABASE … TEMPLATE`), its own migrate
  then finding nothing to do: the migrations ran three times, 6 s of CPU each.
- Everything else a test starts (Cyrus, NSD, spamd, Chromium, SMTP servers, web processes)
  is under its own temp dir on free ports already. What one file shares with itself (the
  RabbitMQ queues of tests/expiry/test_workers_rabbitmq.py, the namespaces of tests/hosts.py)
  stays on one worker: `--dist loadfile` sends a file's tests to one worker.
- The order: the longest files first (below), so neither worker is left with a long file
  at the end while the other has nothing to do.

Without xdist (`scripts/test.sh tests/…`) this does nothing."""
import atexit
import fcntl
import os
import shutil
import subprocess
import sys
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
# Files that run one after the other on one worker, as if they were one: the expiry engine's
# distributed tests on each broker each start three workers and two beats, and the two at
# once (with four xdist workers), beside the other longest files, were the busiest stretch
# of a run.
ONE_AFTER_THE_OTHER = {path: "tests/expiry/test_workers_*.py"
                       for path in ("tests/expiry/test_workers_redis.py", "tests/expiry/test_workers_rabbitmq.py")}


class LongestFirst(OrderedDict):
    """xdist's queue of files (path: {test id: done}), handing out the longest first."""

    def popitem(self, last: bool = True):
        if not hasattr(self, "estimates"):  # the first file asked for: the queue is complete
            import json

            known = json.loads(FILE_SECONDS.read_text()) if FILE_SECONDS.exists() else {}
            for path, group in ONE_AFTER_THE_OTHER.items():
                if path in known:
                    known[group] = known.get(group, 0.0) + known[path]
            measured = [(seconds, len(self[path])) for path, seconds in known.items() if path in self]
            per_test = sum(s for s, _ in measured) / max(1, sum(n for _, n in measured)) if measured else 1.0
            self.estimates = {path: known.get(path, len(tests) * per_test) for path, tests in self.items()}
        path = max(self, key=lambda path: self.estimates.get(path, 0.0))
        return path, self.pop(path)


def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None  # xdist's own
    from xdist.scheduler import LoadFileScheduling

    class Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return ONE_AFTER_THE_OTHER.get(path, path)

    scheduler = Scheduling(config, log)
    scheduler.workqueue = LongestFirst()
    return scheduler


# --- One migration per run -------------------------------------------------------------------------
def _template_name(base: str) -> str:
    return f"test_{base}_template"


def _admin_connection(url):
    """A connection to the server's `postgres` database, in autocommit (CREATE and DROP
    DATABASE run outside a transaction)."""
    import psycopg2

    connection = psycopg2.connect(dbname="postgres", user=url.username, password=url.password, host=url.hostname,
                                  port=url.port or 5432, connect_timeout=10)
    connection.autocommit = True
    return connection


def _migrated_template(database_url: str) -> str:
    """The name of this run's template database: migrated by whichever worker comes
    first (under a file lock), found ready by the others."""
    from urllib.parse import urlsplit, urlunsplit

    url = urlsplit(database_url)
    name = _template_name(url.path.lstrip("/"))
    run = os.environ["PYTEST_XDIST_TESTRUNUID"]
    with open(Path(tempfile.gettempdir(), f"relay-{name}.lock"), "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        lock.seek(0)
        if lock.read().strip() == run:
            return name
        connection = _admin_connection(url)
        with connection.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}"')
            cursor.execute(f'CREATE DATABASE "{name}"')
        connection.close()
        done = subprocess.run([sys.executable, "manage.py", "migrate", "--no-input", "-v", "0"],
                              cwd=Path(__file__).parent.parent, capture_output=True, text=True, timeout=300,
                              env={**os.environ, "DATABASE_URL": urlunsplit(url._replace(path=f"/{name}"))})
        if done.returncode != 0:
            raise RuntimeError(f"migrating the template database {name} failed:\n{done.stdout}{done.stderr}")
        lock.seek(0)
        lock.truncate()
        lock.write(run)
        lock.flush()
    return name


def use_migrated_template() -> None:
    """Under xdist, this worker's test database is to be made from the run's migrated
    template (tests/conftest.py's django_db_modify_db_settings calls this). Without the
    run's id (an xdist too old to give it) each worker migrates its own, as before."""
    if _worker and os.environ.get("PYTEST_XDIST_TESTRUNUID"):
        from django.conf import settings

        settings.DATABASES["default"].setdefault("TEST", {})["TEMPLATE"] = _migrated_template(os.environ["DATABASE_URL"])


def pytest_sessionfinish(session) -> None:
    """The controller drops the run's template once every worker is done with it."""
    if _worker or not session.config.getoption("numprocesses", None):
        return
    from urllib.parse import urlsplit

    url = urlsplit(os.environ["DATABASE_URL"])
    try:
        connection = _admin_connection(url)
        with connection.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{_template_name(url.path.lstrip("/"))}"')
        connection.close()
    except Exception:
        pass  # the next run drops it before migrating its own
