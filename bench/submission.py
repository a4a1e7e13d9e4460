"""The sandboxes' submission port against port 25's ingest, in the same run and the same
`manage.py runsmtp` process: 10 KB messages over 8 connections, each submission
connection signed in once (AUTH PLAIN, on loopback) to a sandbox of its own and sending
to addresses of no mailbox, each port-25 connection to Relay's mailboxes (their senders'
SPF and DMARC served by NSD, as in smtp_ingest). The two alternate, twice each, and the
row gives submissions per second over port 25's messages per second (goal ≥ 0.9).

Then what AUTH costs a connection: connect, EHLO, AUTH, QUIT against connect, EHLO, NOOP,
QUIT, one connection at a time; the difference of the medians.

    scripts/bench.sh submission [--messages 2000] [--connections 8]
"""
import argparse
import smtplib
import statistics
import sys
import time

from bench.common import (bench_addresses, command_line, fresh_database, in_threads, record, setup_django, spawn, stop,
                          wait_until)
from bench.smtp_ingest import _answers, blast, message, sender_dns

INBOUND_PORT, SUBMISSION_PORT = 2636, 2637
AUTH_CONNECTIONS = 300


def submit(logins: list[tuple[str, str]], total: int, connections: int) -> float:
    """Send `total` messages over `connections` signed-in sessions; messages/s."""
    per_connection = total // connections

    def sender(index: int) -> None:
        username, password = logins[index % len(logins)]
        smtp = smtplib.SMTP("127.0.0.1", SUBMISSION_PORT, timeout=30)
        smtp.ehlo()
        smtp.user, smtp.password = username, password
        smtp.auth("PLAIN", smtp.auth_plain)
        for n in range(per_connection):
            to = f"customer{n % 50}@customer.example"
            smtp.sendmail("app@staging.example", [to], message(to, index * per_connection + n))
        smtp.quit()

    return per_connection * connections / in_threads(sender, connections, "submitter(s)")


def connection_ms(login: tuple[str, str] | None) -> float:
    """Median milliseconds of a connection that signs in (or, without `login`, says NOOP)."""
    times = []
    for _ in range(AUTH_CONNECTIONS):
        started = time.perf_counter()
        smtp = smtplib.SMTP("127.0.0.1", SUBMISSION_PORT, timeout=30)
        smtp.ehlo()
        if login is None:
            smtp.noop()
        else:
            smtp.user, smtp.password = login
            smtp.auth("PLAIN", smtp.auth_plain)
        smtp.quit()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--connections", type=int, default=8)
    args = parser.parse_args()
    fresh_database()
    setup_django()
    from accounts.identity import Caller
    from accounts.models import Account
    from mailboxes.lifecycle import mailbox_create
    from mailboxes.models import Message
    from relay.backends import get_backend

    addresses = bench_addresses()
    owner = Account.objects.get(login="bench")
    sandboxes = [mailbox_create(backend=get_backend(), caller=Caller(owner=owner), local_part=None, domain=None,
                                ttl_ms=3_600_000, sandbox=True)[0] for _ in range(args.connections)]
    logins = [(sandbox.address, sandbox.smtp_password) for sandbox in sandboxes]
    dns = sender_dns()
    server = spawn("smtp-submission", [sys.executable, "manage.py", "runsmtp", "--port", str(INBOUND_PORT),
                                       "--submission-port", str(SUBMISSION_PORT)],
                   env={"RELAY_LOG_LEVEL": "WARNING", "RELAY_DNS_RESOLVERS": f"127.0.0.1:{dns.port}"},
                   ready="Relay SMTP on")
    wait_until(lambda: _answers(SUBMISSION_PORT), 30, "runsmtp")
    try:
        blast(INBOUND_PORT, addresses, 200, args.connections)  # warm up both
        submit(logins, 200, args.connections)
        inbound, submitted = [], []
        for _ in range(2):
            inbound.append(blast(INBOUND_PORT, addresses, args.messages, args.connections))
            submitted.append(submit(logins, args.messages, args.connections))
        without_auth = connection_ms(None)
        with_auth = connection_ms(logins[0])
    finally:
        stop(server)
        dns.stop()
    caught = Message.objects.filter(mailbox__sandbox=True).count()
    expected = 200 + 2 * (args.messages // args.connections * args.connections)
    assert caught == expected, f"{caught} submissions caught, {expected} accepted"
    inbound_rate, submitted_rate = statistics.mean(inbound), statistics.mean(submitted)
    figures = (f"{args.messages:,} × 10 KB over {args.connections} connections, alternating, twice each: submission "
               f"{submitted_rate:.0f} msg/s caught ({', '.join(f'{rate:.0f}' for rate in submitted)}) vs port 25 "
               f"{inbound_rate:.0f} msg/s stored ({', '.join(f'{rate:.0f}' for rate in inbound)}) = ratio "
               f"**{submitted_rate / inbound_rate:.2f}**; a connection, one at a time (median of "
               f"{AUTH_CONNECTIONS}): EHLO + AUTH PLAIN + QUIT {with_auth:.1f} ms vs EHLO + NOOP + QUIT "
               f"{without_auth:.1f} ms: AUTH costs **{with_auth - without_auth:.1f} ms** a connection")
    record("submission", command_line(), figures)


if __name__ == "__main__":
    main()
