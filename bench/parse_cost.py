"""What parsing one message costs, the lever issue 71 named "a Rust-backed MIME parser":
Relay's `parse_message` (the standard library's parser and what Relay reads from it), the
standard library's parse alone, and `fast-mail-parser` (Rust, from the package index,
installed by scripts/bench.sh into var/fast-mail-parser, a virtualenv of its own, since
Relay does not depend on it), each on the 10 KB messages of bench/smtp_ingest.py, in one
thread, CPU microseconds per message.

    scripts/bench.sh parse_cost [--messages 3000]
"""
import argparse
import email
import subprocess
import time
from email import policy
from pathlib import Path

from bench.common import command_line, record, setup_django
from bench.smtp_ingest import message

PEER_PYTHON = Path("var/fast-mail-parser/bin/python")
PEER = """
import sys, time
from fast_mail_parser import parse_email
raw = sys.stdin.buffer.read()
count = int(sys.argv[1])
for _ in range(200):
    parse_email(raw)
started = time.thread_time()
for _ in range(count):
    parse_email(raw)
print((time.thread_time() - started) * 1e6 / count)
"""


def cpu_us(parse, raw: bytes, count: int) -> float:
    for _ in range(200):
        parse(raw)
    started = time.thread_time()
    for _ in range(count):
        parse(raw)
    return (time.thread_time() - started) * 1e6 / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=3000)
    args = parser.parse_args()
    setup_django()
    from mailboxes.mail_format import parse_message

    raw = message("bench@relay.localhost", 10_000_001)
    relay = cpu_us(parse_message, raw, args.messages)
    stdlib = cpu_us(lambda data: email.message_from_bytes(data, policy=policy.compat32), raw, args.messages)
    peer = float(subprocess.run([str(PEER_PYTHON), "-c", PEER, str(args.messages)], input=raw, capture_output=True,
                                check=True).stdout)
    version = subprocess.run([str(PEER_PYTHON), "-m", "pip", "show", "fast-mail-parser"], capture_output=True,
                             text=True).stdout.split("Version: ")[1].split()[0]
    record("parse_cost", command_line(),
           f"{len(raw):,}-byte message, {args.messages:,} parses each, CPU per message: Relay's parse_message "
           f"**{relay:.1f} µs**; the standard library's message_from_bytes alone {stdlib:.1f} µs; "
           f"fast-mail-parser {version} **{peer:.1f} µs** (saves at most {relay - peer:.1f} µs of Relay's parse)")


if __name__ == "__main__":
    main()
