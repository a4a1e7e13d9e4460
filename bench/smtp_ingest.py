"""SMTP ingest: 10 KB messages over 8 concurrent connections to `manage.py runsmtp`.
Prints messages per second stored (each readable through the API once DATA is answered
250), and the ratio to a bare aiosmtpd server that discards every message, measured in
the same run. Also the SMTP process's RSS before and after.

The product's whole ingest runs: the event each message publishes for waiters, the
webhook lookup, and a Celery worker (concurrency 1) writing the search words that SMTP
leaves owed, on the same cores while the messages arrive. The figure after the ratio is
how long after the last 250 the words of every message were written.

The sender's SPF and DMARC records are served by NSD (tests/dns_server.py) with a TTL of
300 s, so each message's verdict (SPF pass, aligned, DMARC pass) is worked out as in
production, with the DNS answers cached as their TTLs allow, and no look-up leaves this
machine.

Then the database floor: the rows a stored message needs, written by hand from as many
threads with nothing else running, to show what PostgreSQL alone allows here.

    scripts/bench.sh smtp_ingest [--messages 4000] [--connections 8] [--processes N]
"""
import argparse
import functools
import os
import smtplib
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg2

from bench.common import (bench_addresses, celery_worker, command_line, cpu_seconds, fresh_database, in_threads,
                          postgres_cpu_seconds, record, rss_mb, setup_django, spawn, stop, wait_until)
from tests.ports import free_port

# Free ports, picked when the run starts: two clones (or engineers) may benchmark at once.
RELAY_PORT, BARE_PORT = free_port(), free_port()
LATENCY_MESSAGES = 500

# The bare server's port is its first argument: `python -c BARE_SERVER PORT`.
BARE_SERVER = """
import asyncio
import sys
from aiosmtpd.controller import Controller

class Discard:
    async def handle_RCPT(self, server, session, envelope, address, options):
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        return "250 OK"

controller = Controller(Discard(), hostname="127.0.0.1", port=int(sys.argv[1]))
controller.start()
print("ready", flush=True)
import signal
signal.sigwait([signal.SIGTERM])
controller.stop()
"""


SENDER = "bench@bench.test"


@functools.cache
def _body(size: int) -> str:
    return ("Relay benchmark line, long enough to look like mail. " * 2 + "\r\n") * (size // 108 + 1)


def message(to: str, number: int, size: int = 10_240) -> bytes:
    """A plain-text message of `size` bytes (10 KB unless told) from SENDER to `to`."""
    return (f"From: {SENDER}\r\nTo: {to}\r\nSubject: bench {number}\r\n"
            f"Message-ID: <{number}@bench.test>\r\n\r\n{_body(size)}").encode()[:size]


def sender_dns():
    """NSD serving the sender's SPF (this machine's address) and DMARC records with a
    300 s TTL; stop() it after. Relay's resolver: RELAY_DNS_RESOLVERS=127.0.0.1:<port>."""
    from tests import dns_server

    if not dns_server.installed():
        raise SystemExit("needs nsd (scripts/bench.sh installs it)")
    server = dns_server.DnsServer(Path(tempfile.mkdtemp(prefix="relay-bench-dns-")), free_port(), ttl=300).start()
    server.publish("bench.test", "TXT", "v=spf1 ip4:127.0.0.1 -all")
    server.publish("_dmarc.bench.test", "TXT", "v=DMARC1; p=reject")
    return server


def blast(port: int, addresses: list[str], total: int, connections: int, size: int = 10_240) -> float:
    """Send `total` messages of `size` bytes over `connections` parallel SMTP sessions; messages/s."""
    per_connection = total // connections

    def sender(index: int) -> None:
        smtp = smtplib.SMTP("127.0.0.1", port, timeout=30)
        for n in range(per_connection):
            to = addresses[(index + n) % len(addresses)]
            smtp.sendmail(SENDER, [to], message(to, index * per_connection + n, size))
        smtp.quit()

    return per_connection * connections / in_threads(sender, connections, "sender(s)")


def one_at_a_time(port: int, addresses: list[str], count: int) -> tuple[float, float]:
    """p50 and p99 milliseconds from sending a message to its 250, over one connection
    that sends the next only after: the ingest path's own time, with nothing queued."""
    smtp = smtplib.SMTP("127.0.0.1", port, timeout=30)
    times = []
    for n in range(count):
        to = addresses[n % len(addresses)]
        started = time.perf_counter()
        smtp.sendmail(SENDER, [to], message(to, 10_000_000 + n))
        times.append((time.perf_counter() - started) * 1000)
    smtp.quit()
    times.sort()
    return times[len(times) // 2], times[int(len(times) * 0.99)]


def database_floor(databases: list, mailbox_ids: list, total: int) -> float:
    """Messages/s when one thread per connection in `databases` (psycopg2, open already)
    does nothing but the writes one stored message needs, written by hand: the mailbox's
    counters, the content (10 KB raw and its 10 KB text) and the message row, one
    transaction each. No SMTP, no parsing, no Django: what PostgreSQL alone allows on
    this machine. The connections stay open after: a backend that exits takes its CPU
    time out of /proc before it can be counted."""
    raw = message("floor@relay.localhost", 0)
    text = raw.split(b"\r\n\r\n", 1)[1].decode()
    per_connection = total // len(databases)

    def writer(index: int) -> None:
        db = databases[index]
        cursor = db.cursor()
        for n in range(per_connection):
            mailbox_id = mailbox_ids[(index + n) % len(mailbox_ids)]
            cursor.execute("UPDATE mailboxes_mailbox SET message_count = message_count + 1,"
                           " stored_bytes = stored_bytes + %s WHERE id = %s AND status <> 'deleted' RETURNING id",
                           [len(raw), mailbox_id])
            cursor.execute("INSERT INTO mailboxes_messagecontent (raw, text, html, headers, attachments, parsed_fully,"
                           " created_at) VALUES (%s, %s, '', '[]', '[]', true, now()) RETURNING id",
                           [raw, text])
            content_id = cursor.fetchone()[0]
            cursor.execute("INSERT INTO mailboxes_message (mailbox_id, content_id, received_at, envelope_from,"
                           " envelope_to, from_header, to_header, subject, size, has_attachments, is_read)"
                           " VALUES (%s, %s, now(), 'bench@bench.test', 'floor@relay.localhost',"
                           " 'bench@bench.test', 'floor@relay.localhost', 'bench', %s, false, false)",
                           [mailbox_id, content_id, len(raw)])
            db.commit()

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(len(databases))]
    started = time.monotonic()
    [t.start() for t in threads]
    [t.join() for t in threads]
    return per_connection * len(databases) / (time.monotonic() - started)


def cpu_per_message(blast_once, parts: dict) -> tuple[float, dict]:
    """Run `blast_once` (which returns messages/s and sends `count` messages) and the CPU
    milliseconds per message each part spent meanwhile: parts maps a name to a function
    returning that part's CPU seconds so far."""
    before = {name: read() for name, read in parts.items()}
    rate, count = blast_once()
    return rate, {name: (read() - before[name]) * 1000 / count for name, read in parts.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=4000)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--processes", type=int, default=1,
                        help="runsmtp processes sharing the port (--reuse-port), as a process manager would start them")
    args = parser.parse_args()
    fresh_database()
    setup_django()
    from mailboxes.models import Mailbox, Message, MessageContent

    addresses = bench_addresses()

    dns = sender_dns()
    bare = spawn("smtp-bare", [sys.executable, "-c", BARE_SERVER, str(BARE_PORT)], ready="ready")
    servers = [spawn(f"smtp-relay-{number}", [sys.executable, "manage.py", "runsmtp", "--port", str(RELAY_PORT),
                                              *(["--reuse-port"] if args.processes > 1 else [])],
                     env={"RELAY_LOG_LEVEL": "WARNING", "RELAY_DNS_RESOLVERS": f"127.0.0.1:{dns.port}"},
                     ready="Relay SMTP on") for number in range(args.processes)]
    relay = servers[0]
    wait_until(lambda: _answers(RELAY_PORT), 30, "runsmtp")
    worker = celery_worker("smtp-words")
    try:
        blast(BARE_PORT, addresses, 200, args.connections)  # warm up both
        blast(RELAY_PORT, addresses, 200, args.connections)
        rss_before = rss_mb(relay.pid)
        total = args.messages // args.connections * args.connections
        parts = {"senders": lambda: sum(os.times()[:2]), "bare": lambda: cpu_seconds(bare.pid),
                 "runsmtp": lambda: sum(cpu_seconds(server.pid) for server in servers), "PostgreSQL": postgres_cpu_seconds,
                 "worker": lambda: cpu_seconds(worker.pid)}
        bare_rate, bare_cpu = cpu_per_message(
            lambda: (blast(BARE_PORT, addresses, args.messages, args.connections), total), parts)
        relay_rate, relay_cpu = cpu_per_message(
            lambda: (blast(RELAY_PORT, addresses, args.messages, args.connections), total), parts)
        last_250 = time.monotonic()
        rss_after = rss_mb(relay.pid)
        wait_until(lambda: not MessageContent.objects.filter(words__isnull=True).exists(), 300, "the owed words")
        words_lag = time.monotonic() - last_250
        bare_alone = one_at_a_time(BARE_PORT, addresses, LATENCY_MESSAGES)
        relay_alone = one_at_a_time(RELAY_PORT, addresses, LATENCY_MESSAGES)
        stored = Message.objects.count()
        passed = Message.objects.filter(authenticated=True).count()
    finally:
        stop(*servers, bare, worker)
        dns.stop()
    mailbox_ids = [str(mailbox_id) for mailbox_id in Mailbox.objects.filter(address__in=addresses)
                   .values_list("id", flat=True)]
    databases = [psycopg2.connect(os.environ["DATABASE_URL"]) for _ in range(args.connections)]
    floor_rate, floor_cpu = cpu_per_message(
        lambda: (database_floor(databases, mailbox_ids, total), total),
        {"senders": lambda: sum(os.times()[:2]), "PostgreSQL": postgres_cpu_seconds})
    [db.close() for db in databases]
    expected = 200 + args.messages // args.connections * args.connections + LATENCY_MESSAGES
    assert stored == expected, f"{stored} messages stored, {expected} accepted"
    assert passed == stored, f"{passed} of {stored} messages' verdicts passed"
    figures = (f"{args.messages:,} × 10 KB over {args.connections} connections: runsmtp "
               f"({args.processes} process{'es' if args.processes > 1 else ''}) "
               f"{relay_rate:.0f} msg/s stored vs "
               f"bare aiosmtpd {bare_rate:.0f} msg/s = ratio **{relay_rate / bare_rate:.2f}**; "
               f"every message's search words written {words_lag:.1f} s after the last 250; CPU ms per message, "
               f"bare run: senders {bare_cpu['senders']:.2f}, server {bare_cpu['bare']:.2f}; Relay run: senders "
               f"{relay_cpu['senders']:.2f}, runsmtp {relay_cpu['runsmtp']:.2f}, PostgreSQL {relay_cpu['PostgreSQL']:.2f}, "
               f"words worker {relay_cpu['worker']:.2f} (before its catch-up); one message at a time, MAIL to its 250: "
               f"runsmtp p50 {relay_alone[0]:.1f} ms, p99 {relay_alone[1]:.1f} ms vs bare p50 {bare_alone[0]:.1f} ms; "
               f"SMTP RSS {rss_before:.0f} → {rss_after:.0f} MiB; the database floor (the same rows written by "
               f"psycopg2 from {args.connections} threads, nothing else): {floor_rate:.0f} msg/s = "
               f"{floor_rate / bare_rate:.2f} × bare, PostgreSQL {floor_cpu['PostgreSQL']:.2f} CPU ms per message, "
               f"writers {floor_cpu['senders']:.2f}")
    record("smtp_ingest", command_line(), figures)


def _answers(port: int) -> bool:
    try:
        smtplib.SMTP("127.0.0.1", port, timeout=2).quit()
        return True
    except OSError:
        return False


if __name__ == "__main__":
    main()
