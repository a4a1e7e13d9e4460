"""Verdicts no sender can make expensive (SECURITY.md, "Verdicts"): a DKIM key record with
a 16k-bit modulus and exponent, a mail of 2,000 signatures, and a flood of mail that is
slow to judge, each through the suite's own DNS server (NSD) while another client's
session is timed. None of them may hold another session up, nor the hostile mail's own
`250` past the DNS budget."""
import base64
import secrets
import smtplib
import threading
import time

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicNumbers

from relay import verdicts
from tests import dkim_keys
from tests.helpers import wait_until
from tests.mail_corpus import mail, send
from tests.relay.inbound.test_verdicts import authentication as verdict_of

# Another client's command is answered within this while a hostile mail is judged
# (normally in a few milliseconds).
PROMPT_SECONDS = 0.5
OTHER_CLIENT = "127.0.0.1"
HOSTILE_CLIENT = "127.0.0.4"


def huge_key_record() -> str:
    """A DKIM key record whose check would run pow() with a 16,384-bit modulus and
    exponent: several seconds of one C call holding the GIL."""
    modulus = secrets.randbits(16384) | (1 << 16383) | 1
    exponent = secrets.randbits(16380) | 1
    der = RSAPublicNumbers(exponent, modulus).public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return f"v=DKIM1; k=rsa; p={base64.b64encode(der).decode()}"


def noop_delays_while(port: int, work) -> tuple[list[float], object]:
    """Run `work()` in a thread while another client's open session sends NOOP after
    NOOP; the time from each answer (or the start) to the next, and what `work`
    returned. The server runs in this process, so a check that held the GIL would stop
    this loop too: the gaps between answers show it either way."""
    done, result = threading.Event(), {}

    def run():
        try:
            result["value"] = work()
        except Exception as exc:  # raised again below, in the test's thread
            result["error"] = exc
        finally:
            done.set()

    delays = []
    with smtplib.SMTP("127.0.0.1", port, timeout=120, source_address=(OTHER_CLIENT, 0)) as other:
        other.ehlo("other.test")
        thread = threading.Thread(target=run)
        thread.start()
        last = time.monotonic()
        while not done.is_set():
            assert other.noop()[0] == 250
            delays.append(time.monotonic() - last)
            done.wait(0.02)
            last = time.monotonic()
        thread.join()
    if "error" in result:
        raise result["error"]
    return delays, result.get("value")


def timed_send(port: int, to: str, raw: bytes, sender: str) -> float:
    started = time.monotonic()
    assert send(port, to, raw, sender=sender, source=HOSTILE_CLIENT) == {}
    return time.monotonic() - started


@pytest.fixture
def huge_key(senders, dns_server):
    dns_server.publish("sel._domainkey.huge.test", "TXT", huge_key_record())
    yield "huge.test"
    dns_server.withdraw("sel._domainkey.huge.test")


def test_a_16k_bit_key_is_refused_before_any_arithmetic_and_no_session_waits(smtp_server, client_pro, box, senders,
                                                                              huge_key, settings):
    settings.RELAY_DNS_TIMEOUT_SECONDS = 2
    # Signed by Mail::DKIM for huge.test, so the body hash matches and only the key is left to check.
    raw = dkim_keys.sign(mail(box["address"], "Hi", "text", sender="news@huge.test"), huge_key, "sel",
                         senders.keys["pass.test"])
    delays, took = noop_delays_while(smtp_server.port,
                                     lambda: timed_send(smtp_server.port, box["address"], raw, "news@huge.test"))
    assert max(delays) < PROMPT_SECONDS, f"another session's NOOP took {max(delays):.2f} s"
    assert took < settings.RELAY_DNS_TIMEOUT_SECONDS + 0.5, f"the 250 came {took:.2f} s after DATA"
    found = verdict_of(client_pro, box)
    assert found["dkim"] == [{"result": "permerror", "domain": "huge.test", "selector": "sel"}]
    assert found["verdict"] != "pass"


def test_a_key_of_a_usual_size_with_an_unusual_exponent_is_refused():
    numbers = RSAPublicNumbers(2**61 - 1, secrets.randbits(2048) | (1 << 2047) | 1)
    der = numbers.public_key().public_bytes(serialization.Encoding.DER,
                                            serialization.PublicFormat.SubjectPublicKeyInfo)
    record = f"v=DKIM1; p={base64.b64encode(der).decode()}".encode()
    assert "exponent" in verdicts.key_refusal(record)
    usual = RSAPublicNumbers(65537, numbers.n).public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert verdicts.key_refusal(f"v=DKIM1; p={base64.b64encode(usual).decode()}".encode()) is None


def test_a_mail_of_2000_signatures_checks_the_first_few_and_no_session_waits(smtp_server, client_pro, box, senders):
    body = mail(box["address"], "Your code", "123456", sender="noreply@pass.test")
    real = dkim_keys.sign(body, "pass.test", "sel", senders.keys["pass.test"])
    forged = b"".join(
        f"DKIM-Signature: v=1; a=rsa-sha256; c=relaxed/relaxed; d=s{number}.chosen.test; s=k{number}; "
        f"h=from:to:subject; bh=AAAA; b=AAAA\r\n".encode() for number in range(2000))
    raw = real.replace(b"DKIM-Signature:", forged + b"DKIM-Signature:", 1)
    delays, took = noop_delays_while(smtp_server.port,
                                     lambda: timed_send(smtp_server.port, box["address"], raw, "noreply@pass.test"))
    assert max(delays) < PROMPT_SECONDS, f"another session's NOOP took {max(delays):.2f} s"
    assert took < 2.5, f"the 250 came {took:.2f} s after DATA"
    found = verdict_of(client_pro, box)
    assert len(found["dkim"]) == verdicts.MAX_SIGNATURES
    assert [result["domain"] for result in found["dkim"]] == [f"s{n}.chosen.test" for n in range(5)]


def test_a_flood_of_mail_slow_to_judge_holds_its_own_clients_slots_not_anothers(smtp_server, client_pro, new_box,
                                                                                senders, dns_silent_for, settings):
    """Mail whose checks wait out the whole budget (its domain's nameserver never
    answers) from four clients, five sessions each, all at once: another client's
    ordinary mail still gets its 250 at once and a real verdict."""
    settings.RELAY_DNS_TIMEOUT_SECONDS = 2
    slow_box, other_box = new_box(), new_box()
    slow = mail(slow_box["address"], "Hi", "text", sender="a@x.silent.test")
    flood = [threading.Thread(target=send, args=(smtp_server.port, slow_box["address"], slow),
                              kwargs={"sender": "a@x.silent.test", "source": f"127.0.0.{10 + client}"})
             for client in range(4) for _ in range(5)]
    for session in flood:
        session.start()
    wait_until(lambda: dns_silent_for.dropped >= 16, timeout=10, interval=0.01,
               message="the flood's verdicts to wait on the silent nameserver")
    raw = dkim_keys.sign(mail(other_box["address"], "Your code", "123456", sender="noreply@pass.test"),
                         "pass.test", "sel", senders.keys["pass.test"])
    started = time.monotonic()
    assert send(smtp_server.port, other_box["address"], raw, sender="bounce@pass.test", source=senders.listed) == {}
    took = time.monotonic() - started
    for session in flood:
        session.join(30)
    assert took < 1.0, f"another client's mail waited {took:.2f} s for its 250 behind the flood"
    assert verdict_of(client_pro, other_box)["verdict"] == "pass"


def test_a_signed_body_of_one_long_run_of_whitespace_is_checked_in_linear_time(smtp_server, client_pro, box,
                                                                               senders):
    """dkimpy's relaxed body canonicalization tried every position of a run of spaces
    and tabs that no line end closes: SMTP's longest line (998) of them, line after line,
    cost 0.64 ms of CPU a kilobyte, 6 s for a 10 MB mail, per signature, past the budget.
    Relay's replacement gives the same bytes in linear time (relay/dkim_linear.py)."""
    body = mail(box["address"], "Spaces", "x", sender="noreply@pass.test")
    head, _, _ = body.partition(b"\r\n\r\n")
    raw = dkim_keys.sign(head + b"\r\n\r\n" + (b" \t" * 495 + b"x\r\n") * 8000, "pass.test", "sel",
                         senders.keys["pass.test"], method="relaxed/relaxed")
    assert b"c=relaxed/relaxed" in raw.partition(b"\r\n\r\n")[0].replace(b"\r\n\t", b"").replace(b" ", b"")
    delays, took = noop_delays_while(smtp_server.port,
                                     lambda: timed_send(smtp_server.port, box["address"], raw, "noreply@pass.test"))
    assert max(delays) < PROMPT_SECONDS, f"another session's NOOP took {max(delays):.2f} s"
    assert took < 2.5, f"the 250 came {took:.2f} s after DATA"
    assert verdict_of(client_pro, box)["dkim"] == [{"result": "pass", "domain": "pass.test", "selector": "sel"}]


def test_a_signature_longer_than_any_real_one_is_refused_unchecked(smtp_server, client_pro, box, senders):
    raw = dkim_keys.sign(mail(box["address"], "Hi", "text", sender="noreply@pass.test"), "pass.test", "sel",
                         senders.keys["pass.test"])
    padded = raw.replace(b"DKIM-Signature: v=1;", b"DKIM-Signature: v=1;" + b"\r\n " * 4000, 1)
    delays, took = noop_delays_while(smtp_server.port,
                                     lambda: timed_send(smtp_server.port, box["address"], padded,
                                                        "noreply@pass.test"))
    assert max(delays) < PROMPT_SECONDS and took < 2.5
    assert verdict_of(client_pro, box)["dkim"][0]["result"] == "permerror"


def test_a_header_block_of_a_hundred_thousand_lines_is_not_walked(smtp_server, client_pro, box, senders):
    """dkimpy finds each signed field by walking the header block from the bottom, once
    per field a signature names: over 200,000 lines, a signature naming 64 fields the
    message lacks cost 0.6 s of CPU, and five of them on a 10 MB block, tens of seconds.
    A block over MAX_HEADER_LINES is not checked at all (verdict none)."""
    signed = dkim_keys.sign(mail(box["address"], "Hi", "text", sender="noreply@pass.test"), "pass.test", "sel",
                            senders.keys["pass.test"])
    raw = signed.replace(b"\r\n\r\n", b"\r\n" + b"X-Filler: a\r\n" * 100_000 + b"\r\n", 1)
    delays, took = noop_delays_while(smtp_server.port,
                                     lambda: timed_send(smtp_server.port, box["address"], raw, "noreply@pass.test"))
    assert max(delays) < PROMPT_SECONDS and took < 2.5, (max(delays), took)
    found = verdict_of(client_pro, box)
    assert found["dkim"] == [] and found["verdict"] == "none"
