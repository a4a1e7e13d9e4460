"""Domains of one's own (docs/api.md, "Domains"): added, published in the suite's own DNS
server (NSD), verified through it, used for mailboxes that receive mail over SMTP;
records reported one by one; one account per name; the plan's quota; no removal while
mailboxes live on it."""
import pytest
from django.conf import settings

from domains.keys import unseal
from domains.models import Domain
from tests.helpers import listed
from tests.mail_corpus import send_mail

pytestmark = pytest.mark.django_db(transaction=True)


def add(client, name: str):
    return client.post("/api/v1/domains", {"name": name}, format="json")


def publish(dns, domain: dict, *, skip: tuple = (), wrong: tuple = ()) -> None:
    """Publish the records Relay asked for, leaving out those in `skip` and publishing
    another value for those in `wrong` (by type and name)."""
    for record in domain["records"]:
        key = "dkim" if "._domainkey." in record["name"] else (
            "dmarc" if record["name"].startswith("_dmarc.") else record["type"].lower().replace("txt", "spf"))
        if key in skip:
            continue
        value = record["value"]
        if key in wrong:
            value = "mx.elsewhere.test" if record["type"] == "MX" else value.replace("p=", "p=MIIBwrong")
        dns.publish(record["name"], record["type"], f"10 {value}." if record["type"] == "MX" else value)


def statuses(domain: dict) -> dict:
    return {(record["type"], record["name"]): record["status"] for record in domain["records"]}


def test_a_domain_is_added_published_verified_and_receives_mail(client_pro, dns, smtp_server):
    created = add(client_pro, "Shop.Test.")
    assert created.status_code == 201, created.json()
    domain = created.json()
    assert domain["name"] == "shop.test" and domain["status"] == "pending" and domain["verified_at"] is None
    assert [(r["type"], r["name"]) for r in domain["records"]] == [
        ("MX", "shop.test"), ("TXT", "shop.test"), ("TXT", "relay._domainkey.shop.test"), ("TXT", "_dmarc.shop.test")]
    assert {r["status"] for r in domain["records"]} == {"unchecked"}
    assert domain["records"][0]["value"] == settings.RELAY_MX_HOST
    stored = Domain.objects.get(name="shop.test")
    assert b"PRIVATE KEY" not in stored.dkim_private_key.encode()  # encrypted at rest
    assert unseal(stored.dkim_private_key).startswith(b"-----BEGIN RSA PRIVATE KEY-----")

    refused = client_pro.post("/api/v1/mailboxes", {"domain": "shop.test", "ttl_ms": 600_000}, format="json")
    assert refused.status_code == 400 and "domain" in refused.json()["fields"]  # pending: not yet

    publish(dns, domain)
    verified = client_pro.post(f"/api/v1/domains/{domain['id']}/verify")
    assert verified.status_code == 200
    assert verified.json()["status"] == "verified" and verified.json()["verified_at"]
    assert set(statuses(verified.json()).values()) == {"ok"}

    box = client_pro.post("/api/v1/mailboxes", {"domain": "shop.test", "local_part": "signup", "ttl_ms": 600_000},
                          format="json").json()
    assert box["address"] == "signup@shop.test"
    send_mail(smtp_server.port, box["address"], "Welcome", "Your code is 424242")
    messages = client_pro.get(f"/api/v1/mailboxes/{box['id']}/messages")
    assert listed(messages, "subject") == ["Welcome"]
    assert listed(client_pro.get("/api/v1/domains"), "name") == ["shop.test"]


def test_missing_and_wrong_records_are_reported_one_by_one_and_keep_it_pending(client_pro, dns):
    domain = add(client_pro, "half.test").json()
    publish(dns, domain, skip=("mx", "dmarc"), wrong=("dkim",))
    checked = client_pro.post(f"/api/v1/domains/{domain['id']}/verify").json()
    assert checked["status"] == "pending"
    assert statuses(checked) == {("MX", "half.test"): "missing", ("TXT", "half.test"): "ok",
                                 ("TXT", "relay._domainkey.half.test"): "wrong", ("TXT", "_dmarc.half.test"): "missing"}
    dns.publish("half.test", "MX", "10 mx.elsewhere.test.")
    again = client_pro.post(f"/api/v1/domains/{domain['id']}/verify").json()
    assert statuses(again)[("MX", "half.test")] == "wrong" and again["status"] == "pending"
    assert client_pro.get(f"/api/v1/domains/{domain['id']}").json()["records"] == again["records"]


def test_a_dns_server_that_does_not_answer_leaves_every_record_unchecked(client_pro, silent_dns):
    domain = add(client_pro, "quiet.test").json()
    checked = client_pro.post(f"/api/v1/domains/{domain['id']}/verify").json()
    assert checked["status"] == "pending" and set(statuses(checked).values()) == {"unchecked"}


def test_a_name_belongs_to_one_account_and_is_not_found_by_another(make_client, dns):
    alice, bob = make_client("alice"), make_client("bob")
    domain = add(alice, "owned.test").json()
    assert add(alice, "owned.test").status_code == 409  # her own claim, twice
    for method, path in (("get", ""), ("post", "/verify"), ("delete", "")):
        answer = getattr(bob, method)(f"/api/v1/domains/{domain['id']}{path}")
        assert answer.status_code == 404, (method, path)
    assert listed(bob.get("/api/v1/domains"), "name") == []
    publish(dns, domain)
    alice.post(f"/api/v1/domains/{domain['id']}/verify")
    taken = add(bob, "OWNED.test")  # verified: it is Alice's
    assert taken.status_code == 409 and taken.json()["code"] == "conflict"
    on_theirs = bob.post("/api/v1/mailboxes", {"domain": "owned.test", "ttl_ms": 600_000}, format="json")
    assert on_theirs.status_code == 400 and "domain" in on_theirs.json()["fields"]


def test_a_pending_claim_holds_no_name_and_the_owner_who_verifies_wins(make_client, dns):
    squatter, owner = make_client("squatter"), make_client("owner")
    squatted = add(squatter, "claimed.test")
    assert squatted.status_code == 201
    # The squatter's pending claim tells the owner nothing and keeps nothing from them.
    claimed = add(owner, "claimed.test")
    assert claimed.status_code == 201, claimed.json()
    publish(dns, claimed.json())  # the owner controls the DNS: their key is the one published
    assert squatter.post(f"/api/v1/domains/{squatted.json()['id']}/verify").json()["status"] == "pending"
    assert owner.post(f"/api/v1/domains/{claimed.json()['id']}/verify").json()["status"] == "verified"
    assert squatter.get(f"/api/v1/domains/{squatted.json()['id']}").status_code == 404  # the lost claim is gone
    assert add(squatter, "claimed.test").status_code == 409
    box = owner.post("/api/v1/mailboxes", {"domain": "claimed.test", "ttl_ms": 600_000}, format="json")
    assert box.status_code == 201


def test_a_claim_left_unverified_lapses(make_client, dns):
    from datetime import timedelta

    from domains.services import CLAIM_LIFETIME, claims_purge_lapsed

    holder, later_one = make_client("holder", plan="pro"), make_client("later", plan="pro")
    kept = add(holder, "kept.test").json()
    old = add(holder, "old.test").json()
    Domain.objects.filter(id=old["id"]).update(created_at=Domain.objects.get(id=old["id"]).created_at
                                               - CLAIM_LIFETIME - timedelta(minutes=1))
    assert claims_purge_lapsed() == 1
    assert listed(holder.get("/api/v1/domains"), "name") == [kept["name"]]
    assert add(later_one, "old.test").status_code == 201


@pytest.mark.parametrize("name", ["relay.localhost", "sub.relay.localhost", "no_dots", "-bad.test", "a..test",
                                  "x" * 64 + ".test", "1.2.3.4"])
def test_a_name_that_is_not_a_domain_or_is_relays_own_is_400(client_pro, name):
    answer = add(client_pro, name)
    assert answer.status_code == 400 and "name" in answer.json()["fields"], answer.json()


def test_the_plans_domain_quota_is_429(make_client, settings):
    free, pro = make_client("freeloader", plan="free"), make_client("payer", plan="pro")
    refused = add(free, "free.test")
    assert refused.status_code == 429 and refused.json()["code"] == "quota_exceeded"
    settings.RELAY_MAX_DOMAINS = {**settings.RELAY_MAX_DOMAINS, "pro": 2}
    assert [add(pro, f"d{i}.test").status_code for i in range(3)] == [201, 201, 429]


def test_a_domain_with_active_mailboxes_cannot_be_deleted_until_they_are_gone(client_pro, dns):
    domain = add(client_pro, "busy.test").json()
    publish(dns, domain)
    client_pro.post(f"/api/v1/domains/{domain['id']}/verify")
    box = client_pro.post("/api/v1/mailboxes", {"domain": "busy.test", "ttl_ms": 600_000}, format="json").json()
    refused = client_pro.delete(f"/api/v1/domains/{domain['id']}")
    assert refused.status_code == 409 and refused.json()["code"] == "conflict"
    assert client_pro.delete(f"/api/v1/mailboxes/{box['id']}").status_code == 204
    assert client_pro.delete(f"/api/v1/domains/{domain['id']}").status_code == 204
    assert client_pro.get(f"/api/v1/domains/{domain['id']}").status_code == 404


def test_a_mailbox_token_has_no_domains(api, client_pro):
    token = api.post("/api/v1/mailboxes", {}, format="json").json()["token"]
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert api.get("/api/v1/domains").status_code == 403
    assert add(api, "token.test").status_code == 403
