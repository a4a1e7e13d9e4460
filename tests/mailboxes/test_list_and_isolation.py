"""Listing mailboxes and who may see them (docs/api.md, "Mailboxes"): newest first, pages,
the shape of one, another owner's or another token's mailbox as absent as a missing one,
and deleting one."""
import uuid
from datetime import timedelta

import pytest

from mailboxes.models import Mailbox, Message
from tests.helpers import create_mailbox, deliver, earlier


def test_list_is_newest_first_and_active_only_by_default(client_pro):
    first = create_mailbox(client_pro, local_part="first")
    second = create_mailbox(client_pro, local_part="second", ttl_ms=3_600_000)
    earlier(Mailbox.objects.filter(id__in=[first["id"], second["id"]]), timedelta(minutes=11), "expires_at")
    default = client_pro.get("/api/v1/mailboxes").json()
    everything = client_pro.get("/api/v1/mailboxes?include_expired=true").json()
    assert [m["id"] for m in default["results"]] == [second["id"]]
    assert default["count"] == 1
    assert [m["id"] for m in everything["results"]] == [second["id"], first["id"]]
    assert [m["status"] for m in everything["results"]] == ["active", "expired"]
    assert set(everything) == {"count", "next", "previous", "results"}


def test_list_never_shows_deleted_mailboxes(client_pro):
    gone = create_mailbox(client_pro)
    client_pro.delete(f"/api/v1/mailboxes/{gone['id']}")
    assert client_pro.get("/api/v1/mailboxes?include_expired=true").json()["count"] == 0


def test_list_paginates(client_pro):
    for _ in range(3):
        create_mailbox(client_pro)
    page = client_pro.get("/api/v1/mailboxes?page_size=2").json()
    assert page["count"] == 3 and len(page["results"]) == 2 and page["next"]
    assert client_pro.get("/api/v1/mailboxes?page=99").status_code == 404


def test_mailbox_shape_and_message_count(client_pro):
    body = create_mailbox(client_pro)
    for raw in (b"Subject: one\r\n\r\nx\r\n", b"Subject: two\r\n\r\ny\r\n"):
        deliver(raw, body["address"])
    shown = client_pro.get(f"/api/v1/mailboxes/{body['id']}").json()
    assert set(shown) == {"id", "address", "status", "created_at", "expires_at", "expired_at", "message_count", "name",
                          "tags", "metadata", "sandbox"}
    assert shown["message_count"] == 2
    assert shown["expires_at"].endswith("Z")
    assert client_pro.get("/api/v1/mailboxes").json()["results"][0]["message_count"] == 2


ROUTES = [
    ("get", "/api/v1/mailboxes/{id}"),
    ("delete", "/api/v1/mailboxes/{id}"),
    ("post", "/api/v1/mailboxes/{id}/renew"),
    ("get", "/api/v1/mailboxes/{id}/messages"),
    ("post", "/api/v1/mailboxes/{id}/messages"),
    ("get", "/api/v1/mailboxes/{id}/messages/{mid}"),
    ("get", "/api/v1/mailboxes/{id}/messages/{mid}/raw"),
    ("delete", "/api/v1/mailboxes/{id}/messages/{mid}"),
    ("get", "/api/v1/mailboxes/{id}/outbox"),
]


@pytest.mark.parametrize("method, route", ROUTES)
def test_another_owners_mailbox_is_404_like_a_missing_one(make_client, method, route):
    owner, mallory = make_client("owner"), make_client("mallory")
    body = create_mailbox(owner)
    [mid] = deliver(b"x", body["address"])
    theirs = getattr(mallory, method)(route.format(id=body["id"], mid=mid), {}, format="json")
    missing = getattr(mallory, method)(route.format(id=uuid.uuid4(), mid=mid), {}, format="json")
    assert theirs.status_code == missing.status_code == 404
    assert theirs.json() == missing.json() == {"code": "not_found", "message": "Not found."}
    assert Mailbox.objects.get(id=body["id"]).status == "active"
    assert Message.objects.filter(id=mid).exists()
    assert body["id"] not in [m["id"] for m in mallory.get("/api/v1/mailboxes").json()["results"]]


@pytest.mark.parametrize("method, route", ROUTES)
def test_anonymous_token_cannot_reach_other_mailboxes(api, make_client, method, route):
    owner = make_client("owner")
    body = create_mailbox(owner)
    [mid] = deliver(b"x", body["address"])
    token = api.post("/api/v1/mailboxes", {}, format="json").json()["token"]
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    response = getattr(api, method)(route.format(id=body["id"], mid=mid), {}, format="json")
    assert response.status_code == 404


def test_delete_is_204_then_404_and_queues_cleanup(client_pro):
    body = create_mailbox(client_pro)
    assert client_pro.delete(f"/api/v1/mailboxes/{body['id']}").status_code == 204
    mailbox = Mailbox.objects.get(id=body["id"])
    assert mailbox.status == "deleted" and mailbox.deleted_at and mailbox.cleanup_state == "pending"
    assert client_pro.delete(f"/api/v1/mailboxes/{body['id']}").status_code == 404


def test_delete_of_an_expired_mailbox_keeps_its_cleanup_as_it_was(client_pro):
    body = create_mailbox(client_pro)
    Mailbox.objects.filter(id=body["id"]).update(status="expired", cleanup_state="done")
    assert client_pro.delete(f"/api/v1/mailboxes/{body['id']}").status_code == 204
    mailbox = Mailbox.objects.get(id=body["id"])
    assert (mailbox.status, mailbox.cleanup_state) == ("deleted", "done")
