"""Naming, tagging and finding mailboxes (docs/api.md): name, tags and metadata at creation
and by PATCH, and the list's filters and orderings."""
import json
import threading
from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.utils import timezone

from mailboxes.models import Mailbox
from tests.helpers import create_mailbox, create_via_api, earlier, listed


def patch(client, mailbox_id, body):
    return client.patch(f"/api/v1/mailboxes/{mailbox_id}", body, format="json")


def test_labels_are_set_at_creation_and_shown(client_pro):
    body = create_mailbox(client_pro, name="Signup run 42", tags=["ci", "run-42", "ci"], metadata={"run": 42, "ok": True})
    assert (body["name"], body["tags"], body["metadata"]) == ("Signup run 42", ["ci", "run-42"], {"run": 42, "ok": True})
    shown = client_pro.get(f"/api/v1/mailboxes/{body['id']}").json()
    assert (shown["name"], shown["tags"], shown["metadata"]) == ("Signup run 42", ["ci", "run-42"], {"run": 42, "ok": True})


def test_a_mailbox_without_labels_has_empty_ones(client_pro):
    body = create_mailbox(client_pro)
    assert (body["name"], body["tags"], body["metadata"]) == ("", [], {})


def test_patch_replaces_each_given_field_and_keeps_the_others(client_pro):
    body = create_mailbox(client_pro, name="before", tags=["a"], metadata={"k": 1})
    response = patch(client_pro, body["id"], {"tags": ["b", "c"]})
    assert response.status_code == 200
    assert (response.json()["name"], response.json()["tags"], response.json()["metadata"]) == ("before", ["b", "c"], {"k": 1})
    response = patch(client_pro, body["id"], {"name": "after", "metadata": {"j": [1, 2]}})
    assert (response.json()["name"], response.json()["tags"], response.json()["metadata"]) == ("after", ["b", "c"], {"j": [1, 2]})
    stored = Mailbox.objects.get(id=body["id"])
    assert (stored.name, stored.tags, json.loads(stored.metadata)) == ("after", ["b", "c"], {"j": [1, 2]})


@pytest.mark.parametrize("body, field", [
    ({"name": "x" * 101}, "name"),
    ({"name": "two\nlines"}, "name"),
    ({"name": 7}, "name"),
    ({"tags": ["UPPER"]}, "tags"),
    ({"tags": ["a b"]}, "tags"),
    ({"tags": ["x" * 33]}, "tags"),
    ({"tags": [f"t{i}" for i in range(11)]}, "tags"),
    ({"tags": ["same"] * 11}, "tags"),  # the limit is on the list as sent
    ({"tags": "ci"}, "tags"),
    ({"tags": [1]}, "tags"),
    ({"metadata": ["not", "an", "object"]}, "metadata"),
    ({"metadata": "text"}, "metadata"),
    ({"metadata": {"big": "x" * 4096}}, "metadata"),
    ({"address": "other@relay.localhost"}, "address"),
    ({"expires_at": "2030-01-01T00:00:00Z"}, "expires_at"),
])
def test_a_bad_patch_is_a_400_naming_the_field_and_changes_nothing(client_pro, body, field):
    created = create_mailbox(client_pro, name="kept", tags=["kept"], metadata={"kept": True})
    response = patch(client_pro, created["id"], body)
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_request" and field in response.json()["fields"]
    stored = Mailbox.objects.get(id=created["id"])
    assert (stored.name, stored.tags, json.loads(stored.metadata)) == ("kept", ["kept"], {"kept": True})


def test_metadata_is_returned_as_given_even_with_a_nul(client_pro):
    # JSON allows "\u0000" in a string, which PostgreSQL's jsonb does not: metadata is kept as text.
    metadata = {"nul": "a\x00b", "nested": {"list": [1, 2.5, None, True]}, "émoji": "✓"}
    body = create_mailbox(client_pro, metadata=metadata)
    assert body["metadata"] == metadata
    assert client_pro.get(f"/api/v1/mailboxes/{body['id']}").json()["metadata"] == metadata


def test_a_lone_surrogate_in_the_body_is_a_400(client_pro):
    response = client_pro.post("/api/v1/mailboxes", data='{"name": "\\ud800"}', content_type="application/json")
    assert response.status_code == 400 and "surrogate" in response.json()["message"]


def test_bad_labels_at_creation_are_a_400(client_pro):
    response = create_via_api(client_pro, tags=["Nope!"])
    assert response.status_code == 400 and "tags" in response.json()["fields"]
    assert not Mailbox.objects.exists()


def test_patch_on_an_expired_mailbox_is_410(client_pro):
    body = create_mailbox(client_pro)
    earlier(Mailbox.objects.filter(id=body["id"]), timedelta(minutes=11), "expires_at")
    response = patch(client_pro, body["id"], {"name": "late"})
    assert response.status_code == 410 and response.json()["code"] == "expired"
    assert Mailbox.objects.get(id=body["id"]).name == ""


def test_patch_on_another_owners_mailbox_is_404(client_pro, make_client):
    theirs = create_mailbox(make_client("bob"))
    response = patch(client_pro, theirs["id"], {"name": "mine now"})
    assert response.status_code == 404
    assert Mailbox.objects.get(id=theirs["id"]).name == ""


@pytest.mark.django_db(transaction=True)
def test_concurrent_patches_of_different_fields_both_stand(make_client):
    client = make_client("alice")
    body = create_mailbox(client)
    for round_ in range(10):
        barrier = threading.Barrier(2)
        answers = []

        def send(change) -> None:
            barrier.wait()
            answers.append(patch(client, body["id"], change).status_code)
            connection.close()

        threads = [threading.Thread(target=send, args=(change,)) for change in
                   ({"name": f"name-{round_}"}, {"tags": [f"tag-{round_}"]})]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert answers == [200, 200]
        stored = Mailbox.objects.get(id=body["id"])
        assert (stored.name, stored.tags) == (f"name-{round_}", [f"tag-{round_}"])


# --- the list's filters ---------------------------------------------------------------------
def ids(response) -> list[str]:
    return listed(response, "id")


@pytest.fixture
def fleet(client_pro):
    """Four mailboxes made a minute apart (by their created_at: a record, written by the
    web process's clock, which time_machine moves): names, tags, and one that expires
    first."""
    start = timezone.now()
    made = {}
    specs = [("alpha", "Login flow", ["ci", "login"], 600_000), ("beta", "Signup flow", ["ci", "signup"], 3_600_000),
             ("gamma", "Login retry", ["login"], 7_200_000), ("delta", "", [], 300_000)]
    for minute, (local_part, name, tags, ttl_ms) in enumerate(specs):
        with time_machine.travel(start + timedelta(minutes=minute), tick=False):
            response = create_mailbox(client_pro, local_part=local_part, name=name, tags=tags, ttl_ms=ttl_ms)
            assert "id" in response, response
            made[local_part] = response["id"]
    made["start"] = start
    return made


def test_tag_filters_alone_and_combined(client_pro, fleet):
    assert ids(client_pro.get("/api/v1/mailboxes?tag=ci")) == [fleet["beta"], fleet["alpha"]]
    assert ids(client_pro.get("/api/v1/mailboxes?tag=login")) == [fleet["gamma"], fleet["alpha"]]
    assert ids(client_pro.get("/api/v1/mailboxes?tag=ci&tag=login")) == [fleet["alpha"]]
    assert ids(client_pro.get("/api/v1/mailboxes?tag=nothing")) == []


def test_q_matches_the_address_or_the_name(client_pro, fleet):
    assert ids(client_pro.get("/api/v1/mailboxes?q=login")) == [fleet["gamma"], fleet["alpha"]]
    assert ids(client_pro.get("/api/v1/mailboxes?q=DELT")) == [fleet["delta"]]  # the address, any case


def test_status_and_created_bounds(client_pro, fleet):
    # Half an hour on, by the database's clock: the 5- and 10-minute ones have ended.
    earlier(Mailbox.objects.filter(owner__login="alice"), timedelta(minutes=30), "expires_at")
    assert ids(client_pro.get("/api/v1/mailboxes?status=expired")) == [fleet["delta"], fleet["alpha"]]
    assert ids(client_pro.get("/api/v1/mailboxes?status=active")) == [fleet["gamma"], fleet["beta"]]
    after = (fleet["start"] + timedelta(seconds=90)).isoformat()
    before = (fleet["start"] + timedelta(seconds=150)).isoformat()
    # Two have expired by now: include them.
    everything = {"include_expired": "true"}
    assert ids(client_pro.get("/api/v1/mailboxes", {**everything, "created_after": after})) == [fleet["delta"],
                                                                                              fleet["gamma"]]
    assert ids(client_pro.get("/api/v1/mailboxes", {**everything, "created_after": after,
                                                    "created_before": before})) == [fleet["gamma"]]


def test_orderings(client_pro, fleet):
    newest_first = [fleet["delta"], fleet["gamma"], fleet["beta"], fleet["alpha"]]
    assert ids(client_pro.get("/api/v1/mailboxes")) == newest_first
    assert ids(client_pro.get("/api/v1/mailboxes?ordering=-created_at")) == newest_first
    assert ids(client_pro.get("/api/v1/mailboxes?ordering=created_at")) == newest_first[::-1]
    soonest = [fleet["delta"], fleet["alpha"], fleet["beta"], fleet["gamma"]]
    assert ids(client_pro.get("/api/v1/mailboxes?ordering=expires_at")) == soonest
    assert ids(client_pro.get("/api/v1/mailboxes?ordering=-expires_at")) == soonest[::-1]


@pytest.mark.parametrize("query, field", [
    ("tag=Bad!", "tag"),
    ("status=deleted", "status"),
    ("ordering=address", "ordering"),
    ("created_after=yesterday", "created_after"),
    ("created_before=2026-13-01", "created_before"),
    ("q=" + "x" * 101, "q"),
])
def test_bad_filter_values_are_a_400_that_says_what_is_wrong(client_pro, query, field):
    response = client_pro.get(f"/api/v1/mailboxes?{query}")
    assert response.status_code == 400
    assert field in response.json()["fields"] and response.json()["fields"][field][0]


def test_filters_never_show_another_owners_mailbox(client_pro, make_client):
    create_mailbox(make_client("bob"), name="Login flow", tags=["ci"])
    assert ids(client_pro.get("/api/v1/mailboxes?tag=ci")) == []
    assert ids(client_pro.get("/api/v1/mailboxes?q=login&include_expired=true")) == []
