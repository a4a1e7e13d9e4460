"""SMTP ingest beside a peer: the same load (N × 10 KB over 8 connections, the messages
of bench/smtp_ingest.py) against Relay's `runsmtp`, against maildev 3 (a widely used
mail-catching server with a web UI and a REST API of its own, storing each message as a
file) and against a bare aiosmtpd server that discards every message, one after the
other in the same run.

Prints, for each: messages per second, whether it holds every message afterwards
(Relay: through its database; maildev: `GET /api/email`; the bare server holds nothing
by design), and the CPU milliseconds per message it spent (Relay: runsmtp, PostgreSQL
and the worker writing search words; maildev: its node process; bare: its process).
Relay works out every message's verdict: the sender's SPF and DMARC records are served
by NSD with a 300 s TTL (bench/smtp_ingest.py, `sender_dns`).

scripts/bench.sh installs maildev with npm into var/maildev (its package.json pins the
version) and NSD with apt when missing.

    scripts/bench.sh smtp_peers [--messages 4000] [--connections 8]
"""
import argparse
import json
import shutil
import signal
import sys
import urllib.request
from pathlib import Path

from bench.common import (ROOT, bench_addresses, celery_worker, command_line, cpu_seconds, fresh_database,
                          postgres_cpu_seconds, record, setup_django, spawn, stop, wait_until)
from bench.smtp_ingest import BARE_PORT, BARE_SERVER, RELAY_PORT, _answers, blast, sender_dns
from tests.ports import free_port

MAILDEV = ROOT / "var" / "maildev" / "node_modules" / ".bin" / "maildev"
MAILDEV_SMTP, MAILDEV_WEB = free_port(), free_port()
WARM_UP = 200


def maildev_count() -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{MAILDEV_WEB}/api/email", timeout=60) as response:
        return len(json.load(response))


def maildev_version() -> str:
    return json.loads((MAILDEV.parent.parent / "maildev" / "package.json").read_text())["version"]


def measure(port: int, addresses: list[str], messages: int, connections: int, parts: dict) -> tuple[float, dict]:
    """msg/s over `connections`, and each part's CPU milliseconds per message meanwhile."""
    total = messages // connections * connections
    before = {name: read() for name, read in parts.items()}
    rate = blast(port, addresses, messages, connections)
    return rate, {name: (read() - before[name]) * 1000 / total for name, read in parts.items()}


def py_spy(pid: int, output: str):
    """py-spy sampling `pid` (only the thread holding the GIL) into `output`, folded; stop() it."""
    return spawn("peers-py-spy", [str(Path(sys.executable).parent / "py-spy"), "record", "--gil", "-r", "250",
                                  "-f", "raw", "-o", str(Path(output).resolve()), "-p", str(pid)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=4000)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--py-spy", metavar="FILE",
                        help="sample runsmtp with py-spy while Relay's messages arrive (the thread holding the GIL, "
                             "250 Hz), folded stacks into FILE")
    args = parser.parse_args()
    if not MAILDEV.exists():
        raise SystemExit(f"maildev is not installed at {MAILDEV} (scripts/bench.sh smtp_peers installs it)")
    fresh_database()
    setup_django()
    from mailboxes.models import Message

    addresses = bench_addresses()
    total = args.messages // args.connections * args.connections
    store = ROOT / "var" / "bench" / "maildev-mail"
    shutil.rmtree(store, ignore_errors=True)
    store.mkdir(parents=True)

    dns = sender_dns()
    bare = spawn("peers-bare", [sys.executable, "-c", BARE_SERVER, str(BARE_PORT)], ready="ready")
    maildev = spawn("peers-maildev", [str(MAILDEV), "--smtp", str(MAILDEV_SMTP), "--web", str(MAILDEV_WEB),
                                      "--ip", "127.0.0.1", "--web-ip", "127.0.0.1", "--mail-directory", str(store)],
                    ready="MailDev API running")
    relay = spawn("peers-relay", [sys.executable, "manage.py", "runsmtp", "--port", str(RELAY_PORT)],
                  env={"RELAY_LOG_LEVEL": "WARNING", "RELAY_DNS_RESOLVERS": f"127.0.0.1:{dns.port}"},
                  ready="Relay SMTP on")
    wait_until(lambda: _answers(RELAY_PORT) and _answers(MAILDEV_SMTP), 30, "the SMTP servers")
    worker = celery_worker("peers-words")
    try:
        for port in (BARE_PORT, MAILDEV_SMTP, RELAY_PORT):
            blast(port, addresses, WARM_UP, args.connections)
        bare_rate, bare_cpu = measure(BARE_PORT, addresses, args.messages, args.connections,
                                      {"server": lambda: cpu_seconds(bare.pid)})
        maildev_rate, maildev_cpu = measure(MAILDEV_SMTP, addresses, args.messages, args.connections,
                                            {"server": lambda: cpu_seconds(maildev.pid)})
        profiler = py_spy(relay.pid, args.py_spy) if args.py_spy else None
        relay_rate, relay_cpu = measure(RELAY_PORT, addresses, args.messages, args.connections,
                                        {"runsmtp": lambda: cpu_seconds(relay.pid), "PostgreSQL": postgres_cpu_seconds,
                                         "worker": lambda: cpu_seconds(worker.pid)})
        if profiler is not None:
            profiler.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
            profiler.wait(60)
        maildev_held = maildev_count()
        relay_held = Message.objects.count()
        relay_passed = Message.objects.filter(authenticated=True).count()
    finally:
        stop(relay, maildev, bare, worker)
        dns.stop()
    sent = WARM_UP + total
    relay_total = sum(relay_cpu.values())
    record("smtp_peers", command_line(),
           f"{total:,} × 10 KB over {args.connections} connections: **Relay {relay_rate:.0f} msg/s**, holds "
           f"{relay_held:,} of {sent:,} ({relay_passed:,} with a verdict of pass), CPU ms per message: runsmtp "
           f"{relay_cpu['runsmtp']:.2f} + PostgreSQL {relay_cpu['PostgreSQL']:.2f} + words worker "
           f"{relay_cpu['worker']:.2f} = **{relay_total:.2f}**; **maildev {maildev_version()} {maildev_rate:.0f} msg/s**, "
           f"holds {maildev_held:,} of {sent:,}, node {maildev_cpu['server']:.2f} CPU ms per message; bare aiosmtpd "
           f"{bare_rate:.0f} msg/s, {bare_cpu['server']:.2f} CPU ms per message. Relay / maildev **"
           f"{relay_rate / maildev_rate:.2f}**, Relay / bare **{relay_rate / bare_rate:.2f}**, Relay's CPU per "
           f"message (runsmtp + PostgreSQL) / bare's **"
           f"{(relay_cpu['runsmtp'] + relay_cpu['PostgreSQL']) / bare_cpu['server']:.1f}×**")
    if relay_held != sent or maildev_held != sent:
        raise SystemExit(f"a server lost messages: Relay holds {relay_held}, maildev {maildev_held}, of {sent}")


if __name__ == "__main__":
    main()
