"""Mail read from Cyrus (docs/configuration.md, "A mail server as the backend"): a Cyrus of
the benchmark's own (tests/cyrus_server.py), `--mailboxes` live mailboxes on it, mail
delivered over LMTP at `--rate` a second for `--seconds`, to mailboxes picked at random,
with a Celery worker (2 processes) and beat as `make run` starts them, beat polling Cyrus
every second (RELAY_MAILSERVER_POLL_SECONDS).

Measured:
- the time from each LMTP 250 to the message being in Relay's store, seen by polling the
  database every 10 ms (an API read would make Relay read Cyrus at once: this is the
  time without any read);
- idle, after the load: what Relay asks of Cyrus per second (its own counters,
  relay_mailserver_requests_total), and how long one poll over all the mailboxes takes;
- the cost per mailbox: the worker's memory with them against without, the connections
  the reader holds to Cyrus, and what each mailbox keeps in the database.

    scripts/bench.sh cyrus_read [--mailboxes 1000] [--rate 20] [--seconds 60]
"""
import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import command_line, fresh_database, record, rss_mb, setup_django, spawn, stop, wait_until
from bench.waiting import percentile

IDLE_SECONDS = 30


def counters(directory: str) -> dict[str, float]:
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=directory)
    found = {}
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == "relay_mailserver_requests_total":
                found[sample.labels["kind"]] = found.get(sample.labels["kind"], 0) + sample.value
    return found


def connections_to(ports: set[int], pids: set[int]) -> int:
    """Established TCP connections from `pids` to any of `ports`."""
    output = subprocess.run(["ss", "-tnpH", "state", "established"], capture_output=True, text=True).stdout
    count = 0
    for line in output.splitlines():
        fields = line.split()
        if len(fields) >= 4 and int(fields[3].rsplit(":", 1)[1]) in ports and \
                any(f"pid={pid}," in line for pid in pids):
            count += 1
    return count


def tree(pid: int) -> set[int]:
    found, stack = set(), [pid]
    while stack:
        current = stack.pop()
        found.add(current)
        try:
            with open(f"/proc/{current}/task/{current}/children") as children:
                stack += [int(child) for child in children.read().split()]
        except FileNotFoundError:
            pass
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mailboxes", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=20)
    parser.add_argument("--seconds", type=int, default=60)
    args = parser.parse_args()
    # Django is set up only once the environment points Relay at this Cyrus (run():
    # fresh_database): set up before, it would read its settings without it, and make
    # the mailboxes on the default backend, unknown to Cyrus.
    from tests.cyrus_server import CyrusServer, installed

    if not installed():
        raise SystemExit("Cyrus is not installed: apt-get install -y --no-install-recommends cyrus-imapd "
                         "cyrus-caldav sasl2-bin")
    root = Path(tempfile.mkdtemp(prefix="relay-bench-cyrus-"))
    metrics_dir = tempfile.mkdtemp(prefix="relay-bench-metrics-")
    cyrus = CyrusServer(root).start()
    env = {**cyrus.relay_settings(), "RELAY_MAILSERVER_POLL_SECONDS": "1", "RELAY_LOG_LEVEL": "WARNING",
           "PROMETHEUS_MULTIPROC_DIR": metrics_dir}
    os.environ.update(env)
    try:
        run(args, cyrus, env, metrics_dir)
    finally:
        cyrus.stop()
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(metrics_dir, ignore_errors=True)


def run(args, cyrus, env: dict, metrics_dir: str) -> None:
    fresh_database()
    setup_django()
    from django.db import connection

    from accounts.services import account_create_with_key
    from core.schedules import install_schedules
    from mailboxes.lifecycle import mailbox_create
    from accounts.identity import Caller
    from mailboxes.models import Mailbox, Message
    from relay import mailserver
    from relay.backends import get_backend, keeps_accounts

    install_schedules(read_mail_server=keeps_accounts())
    worker_args = [sys.executable, "-m", "celery", "-A", "config", "worker", "-c", "2", "-n", "bench-cyrus@%h",
                   "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "INFO"]
    empty = spawn("worker-cyrus-empty", worker_args, env=env, ready=" ready.")
    time.sleep(5)  # settle before reading its memory
    rss_without = rss_mb(empty.pid)
    stop(empty)

    owner, _ = account_create_with_key(login="bench", plan="enterprise")
    started = time.monotonic()
    mailboxes = [mailbox_create(backend=get_backend(), caller=Caller(owner=owner), local_part=f"box{i}", domain=None,
                                ttl_ms=6 * 3_600_000)[0] for i in range(args.mailboxes)]
    created_in = time.monotonic() - started
    mailserver.poll()  # every mailbox's first read (its state), as the first poll after creation would
    worker = spawn("worker-cyrus", worker_args, env=env, ready=" ready.")
    beat = spawn("beat-cyrus", [sys.executable, "-m", "celery", "-A", "config", "beat", "-l", "WARNING",
                                "-s", str(Path(metrics_dir) / "beat-schedule")], env=env)
    try:
        time.sleep(5)  # the first polls
        latencies = deliver_and_watch(args, cyrus, mailboxes, Message)
        before, at = counters(metrics_dir), time.monotonic()
        time.sleep(IDLE_SECONDS)
        after, idle_for = counters(metrics_dir), time.monotonic() - at
        per_second = {kind: (after.get(kind, 0) - before.get(kind, 0)) / idle_for for kind in ("imap", "jmap", "blob")}
        pids = tree(worker.pid)
        held = connections_to({cyrus.imap_port, cyrus.http_port}, pids)
        rss_with = rss_mb(worker.pid)
    finally:
        stop(worker, beat)
    polls = []
    for _ in range(10):
        begun = time.monotonic()
        mailserver.poll()
        polls.append(time.monotonic() - begun)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT avg(pg_column_size(server_state) + pg_column_size(server_marker)) "
                       f"FROM {Mailbox._meta.db_table}")
        state_bytes = float(cursor.fetchone()[0])
    ms = lambda p: percentile(latencies, p) * 1000  # noqa: E731
    figures = (f"{args.mailboxes} live mailboxes on Cyrus 3.6 (created in {created_in:.0f} s), {len(latencies)} mails "
               f"over LMTP at {args.rate:g}/s: LMTP 250 → stored p50 **{ms(0.5):.0f} ms**, p99 **{ms(0.99):.0f} ms**, "
               f"max {ms(1.0):.0f} ms, without any read; idle: {per_second['imap']:.2f} IMAP sessions/s, "
               f"{per_second['jmap']:.2f} JMAP requests/s, {per_second['blob']:.2f} downloads/s; one idle poll over "
               f"all {percentile(polls, 0.5) * 1000:.0f} ms (p50 of 10); worker RSS {rss_with:.0f} MiB with them, "
               f"{rss_without:.0f} MiB without ({(rss_with - rss_without) * 1024 / args.mailboxes:.1f} KiB a "
               f"mailbox); connections to Cyrus held idle: {held}; reader state {state_bytes:.0f} bytes a mailbox")
    print(figures)
    record("cyrus_read", command_line(), figures)


def deliver_and_watch(args, cyrus, mailboxes: list, Message) -> list[float]:
    """Deliver at a steady rate over one LMTP connection while another thread watches the
    database; the latency of each message."""
    import smtplib
    import threading

    accepted: dict[str, float] = {}
    seen: dict[str, float] = {}
    done = threading.Event()

    def watch() -> None:
        from django.db import connection

        last = 0
        while not done.is_set() or len(seen) < len(accepted):
            for message_id, subject in Message.objects.filter(id__gt=last).order_by("id").values_list("id", "subject"):
                seen.setdefault(subject, time.monotonic())
                last = message_id
            time.sleep(0.01)
        connection.close()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    total = int(args.rate * args.seconds)
    with smtplib.LMTP("127.0.0.1", cyrus.lmtp_port, timeout=30) as lmtp:
        began = time.monotonic()
        for i in range(total):
            wait = began + i / args.rate - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            box = random.choice(mailboxes)
            subject = f"bench {i}"
            lmtp.sendmail("bench@example.com", [box.address],
                          f"Subject: {subject}\r\nMessage-ID: <{i}-{began}@bench>\r\n\r\nYour code is {100000 + i}.\r\n"
                          .encode())
            accepted[subject] = time.monotonic()
    done.set()
    wait_until(lambda: len(seen) >= len(accepted), 120, "every message to be stored")
    watcher.join(5)
    return [seen[subject] - accepted[subject] for subject in accepted]


if __name__ == "__main__":
    main()
