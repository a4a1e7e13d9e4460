"""DKIM signatures on mail out (docs/api.md, "Domains"): made by Relay (dkimpy) when the
mail is queued, checked by an independent verifier (Perl's Mail::DKIM) against the key
published in the suite's own DNS server."""
import re

import pytest

from mailboxes.models import Mailbox
from relay.outbox.outbound import outbound_queue
from tests import dkim_keys
from tests.domains.test_domains import add, publish

pytestmark = pytest.mark.django_db(transaction=True)


def queued_bytes(mailbox_id) -> bytes:
    mail = outbound_queue(mailbox=Mailbox.objects.get(id=mailbox_id), to=["someone@example.com"],
                          subject="Hello from my domain", text="Hi there")
    return bytes(mail.message)


def signature_tags(raw: bytes) -> dict:
    header = re.search(rb"^DKIM-Signature:(.*?)\r\n(?![ \t])", raw, re.S | re.M).group(1)
    return {name.strip().decode(): b"".join(value.split()).decode()
            for name, _, value in (part.partition(b"=") for part in header.split(b";")) if name.strip()}


def test_mail_from_a_mailbox_on_a_verified_domain_is_signed_with_its_key(client_pro, dns, senders):
    domain = add(client_pro, "brand.test").json()
    publish(dns, domain)
    assert client_pro.post(f"/api/v1/domains/{domain['id']}/verify").json()["status"] == "verified"
    box = client_pro.post("/api/v1/mailboxes", {"domain": "brand.test", "local_part": "hello", "ttl_ms": 600_000},
                          format="json").json()
    raw = queued_bytes(box["id"])
    tags = signature_tags(raw)
    assert (tags["d"], tags["s"], tags["c"]) == ("brand.test", "relay", "relaxed/relaxed")
    assert {"from", "to", "subject", "date", "message-id"} <= set(tags["h"].lower().split(":"))
    assert dkim_keys.verify(raw, dns.port) == [("pass", "brand.test", "relay")]
    tampered = raw.replace(b"Hi there", b"Hi thief")
    assert dkim_keys.verify(tampered, dns.port)[0][0] == "fail"


def test_mail_from_relays_own_domain_is_signed_only_with_the_key_file(client_pro, dns, senders, settings,
                                                                     tmp_path):
    box = client_pro.post("/api/v1/mailboxes", {"ttl_ms": 600_000}, format="json").json()
    assert b"DKIM-Signature" not in queued_bytes(box["id"])
    key_file, record = dkim_keys.new_key(tmp_path, "relay.localhost", "relay")
    dns.publish("relay._domainkey.relay.localhost", "TXT", record)
    settings.RELAY_DKIM_PRIVATE_KEY_FILE = str(key_file)
    raw = queued_bytes(box["id"])
    assert dkim_keys.verify(raw, dns.port) == [("pass", "relay.localhost", "relay")]


def test_a_release_is_signed_for_the_mailboxs_domain_over_its_resent_fields(client_pro, dns, senders, settings,
                                                                             tmp_path):
    from relay.outbox.outbound import release_queue
    from tests.helpers import deliver

    box = client_pro.post("/api/v1/mailboxes", {"ttl_ms": 600_000}, format="json").json()
    caught = b"From: shop@staging.example\r\nTo: alice@customer.example\r\nSubject: Receipt\r\n\r\nThanks\r\n"
    [message_id] = deliver(caught, box["address"])
    # A selector of its own: the suite's DNS server keeps what other tests published under "relay".
    key_file, record = dkim_keys.new_key(tmp_path, "relay.localhost", "release")
    dns.publish("release._domainkey.relay.localhost", "TXT", record)
    settings.RELAY_DKIM_PRIVATE_KEY_FILE, settings.RELAY_DKIM_SELECTOR = str(key_file), "release"
    mail = release_queue(mailbox=Mailbox.objects.get(id=box["id"]), message_id=message_id, to=["qa@team.example"])
    raw = bytes(mail.message)
    assert raw.startswith(b"DKIM-Signature:") and raw.endswith(b"\r\n" + caught)
    tags = signature_tags(raw)
    assert (tags["d"], tags["s"]) == ("relay.localhost", "release")
    assert {"resent-from", "resent-to", "resent-date", "resent-message-id", "from"} <= set(tags["h"].split(":"))
    assert dkim_keys.verify(raw, dns.port) == [("pass", "relay.localhost", "release")]
