"""What storing one message costs, without SMTP: `message_ingest` (parse, codes and
links, the two statements of storing, the webhooks check, the commit) of the 10 KB
messages of bench/smtp_ingest.py, from T threads of this process, each message to one
of 50 mailboxes, its verdict given (the verdicts benchmark measures those). Prints the
Python CPU and the PostgreSQL CPU per message, and messages per second. No words worker
runs: the words' cost is measured apart (the same figure for `to_tsvector` alone).

    scripts/bench.sh store_cost [--messages 400] [--threads 1]
"""
import argparse
import threading
import time

from bench.common import bench_addresses, command_line, fresh_database, postgres_cpu_seconds, record, setup_django
from bench.smtp_ingest import SENDER, message


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=400, help="per thread")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    fresh_database()
    setup_django()
    from django.db import connection

    from mailboxes.models import Message
    from mailboxes.messages import recipient_by_address
    from relay.ingest import message_ingest

    addresses = bench_addresses()
    verdict = {"spf": {"result": "pass", "domain": "bench.test"}, "dkim": [],
               "dmarc": {"result": "pass", "policy": "reject", "domain": "bench.test"}, "verdict": "pass"}
    python_cpu = [0.0] * args.threads

    def store(thread: int, count: int, first: int) -> None:
        recipients = [recipient_by_address(address=address) for address in addresses]
        raws = [message(addresses[n % 50], first + n) for n in range(count)]
        started = time.thread_time()
        for n, raw in enumerate(raws):
            message_ingest(raw=raw, mail_from=SENDER, recipients=[recipients[(thread + n) % 50]],
                            authentication=verdict)
        python_cpu[thread] += time.thread_time() - started
        # The connection stays open: a backend that exits takes its CPU time out of /proc.

    def run(count: int, first: int) -> float:
        threads = [threading.Thread(target=store, args=(index, count, first + index * count))
                   for index in range(args.threads)]
        started = time.monotonic()
        [thread.start() for thread in threads]
        [thread.join() for thread in threads]
        return time.monotonic() - started

    run(20, 0)  # warm up: connections, prepared statements
    python_cpu[:] = [0.0] * args.threads
    postgres_before = postgres_cpu_seconds()
    seconds = run(args.messages, 1_000_000)
    total = args.messages * args.threads
    postgres_ms = (postgres_cpu_seconds() - postgres_before) * 1000 / total
    assert Message.objects.count() == total + 20 * args.threads
    with connection.cursor() as cursor:
        body = message("x@relay.localhost", 0).split(b"\r\n\r\n", 1)[1].decode()
        started = time.monotonic()
        cursor.execute("SELECT sum(length(to_tsvector('simple', %s || n::text))) FROM generate_series(1, 200) n",
                       [body])
        words_ms = (time.monotonic() - started) * 1000 / 200
    record("store_cost", command_line(),
           f"{total:,} × 10 KB stored by message_ingest from {args.threads} thread(s): {total / seconds:.0f} msg/s; "
           f"CPU ms per message: Python **{sum(python_cpu) * 1000 / total:.2f}**, PostgreSQL "
           f"**{postgres_ms:.2f}**; the words the worker writes later: to_tsvector of the 10 KB text alone "
           f"{words_ms:.2f} ms")


if __name__ == "__main__":
    main()
