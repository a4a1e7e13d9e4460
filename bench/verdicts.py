"""Verdicts at ingest: what SPF, DKIM and DMARC cost a message. Two `runsmtp` processes
in the same run, one working out every message's verdict, one with RELAY_SMTP_VERDICTS
off; 10 KB messages signed with DKIM (Perl's Mail::DKIM, signed once before the run)
over 8 connections to each, from an address the sender's SPF record names. The sender's
records are served by NSD (tests/dns_server.py) with a TTL of 300 s, so after the first
message Relay's resolver answers from its cache, as it would for a busy sender.

Prints messages per second stored and runsmtp's CPU milliseconds per message for each,
and the difference: the cost of a verdict.

    scripts/bench.sh verdicts [--messages 2000] [--connections 8]
"""
import argparse
import smtplib
import sys
import tempfile
from pathlib import Path

from bench.common import (bench_addresses, command_line, cpu_seconds, fresh_database, in_threads, record, setup_django,
                          spawn, stop, wait_until)
from tests import dkim_keys, dns_server

PORTS = {"on": 2628, "off": 2629}


def message(to: str, number: int) -> bytes:
    body = ("Relay benchmark line, long enough to look like mail. " * 2 + "\r\n") * 95
    return (f"From: Bench <noreply@bench.test>\r\nTo: {to}\r\nSubject: Your code {number}\r\n"
            f"Date: Wed, 25 Nov 2026 12:00:00 +0000\r\nMessage-ID: <{number}@bench.test>\r\n\r\n{body}").encode()[:10_240]


def blast(port: int, signed: list[tuple[str, bytes]], connections: int) -> float:
    """Send every (recipient, message) over `connections` parallel sessions; messages/s."""
    def sender(index: int) -> None:
        with smtplib.SMTP("127.0.0.1", port, timeout=30) as smtp:
            for to, raw in signed[index::connections]:
                smtp.sendmail("bounce@bench.test", [to], raw)

    return len(signed) / in_threads(sender, connections, "sender(s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--connections", type=int, default=8)
    args = parser.parse_args()
    if not dns_server.installed() or not dkim_keys.available():
        raise SystemExit("needs nsd, opendkim-tools and libmail-dkim-perl (scripts/test.sh installs them)")
    fresh_database()
    setup_django()
    from mailboxes.models import Message
    from tests.helpers import free_port

    root = Path(tempfile.mkdtemp(prefix="relay-bench-dns-"))
    dns = dns_server.DnsServer(root / "nsd", free_port(), ttl=300).start()
    key_file, record_text = dkim_keys.new_key(root / "keys", "bench.test", "sel")
    dns.publish("sel._domainkey.bench.test", "TXT", record_text)
    dns.publish("bench.test", "TXT", "v=spf1 ip4:127.0.0.1 -all")
    dns.publish("_dmarc.bench.test", "TXT", "v=DMARC1; p=reject")

    addresses = bench_addresses()
    signed = [(addresses[n % len(addresses)], dkim_keys.sign(message(addresses[n % len(addresses)], n), "bench.test",
                                                             "sel", key_file))
              for n in range(args.messages + 100)]
    env = {"RELAY_LOG_LEVEL": "WARNING", "RELAY_DNS_RESOLVERS": f"127.0.0.1:{dns.port}"}
    servers = {mode: spawn(f"smtp-verdicts-{mode}", [sys.executable, "manage.py", "runsmtp", "--port", str(port)],
                           env={**env, "RELAY_SMTP_VERDICTS": "true" if mode == "on" else "false"},
                           ready="Relay SMTP on") for mode, port in PORTS.items()}
    figures = {}
    try:
        for mode, port in PORTS.items():
            blast(port, signed[:100], args.connections)  # warm up (and, with verdicts, fill the cache)
        for mode, port in PORTS.items():
            before = cpu_seconds(servers[mode].pid)
            rate = blast(port, signed[100:], args.connections)
            figures[mode] = (rate, (cpu_seconds(servers[mode].pid) - before) * 1000 / args.messages)
        verdicts = Message.objects.filter(authenticated=True).count()
        wait_until(lambda: Message.objects.count() == 2 * len(signed), 30, "every message stored")
    finally:
        stop(*servers.values())
        dns.stop()
    assert verdicts == len(signed), f"{verdicts} of {len(signed)} checked messages passed"
    (on_rate, on_cpu), (off_rate, off_cpu) = figures["on"], figures["off"]
    record("verdicts", command_line(),
           f"{args.messages:,} × 10 KB DKIM-signed messages over {args.connections} connections, sender's SPF, DKIM "
           f"key and DMARC (p=reject) cached at a 300 s TTL: verdicts on {on_rate:.0f} msg/s, runsmtp "
           f"{on_cpu:.2f} CPU ms per message (every verdict pass); off {off_rate:.0f} msg/s, {off_cpu:.2f} CPU ms; "
           f"a verdict costs **{on_cpu - off_cpu:.2f} CPU ms** per message, throughput ratio on/off "
           f"{on_rate / off_rate:.2f}")


if __name__ == "__main__":
    main()
