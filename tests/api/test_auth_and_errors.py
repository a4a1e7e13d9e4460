"""Authentication, keys, and the promise that no client input gets a 500."""
import pytest
from django.core.management import call_command

from accounts.identity import secret_digest as hash_secret
from accounts.models import Account as Owner, ApiKey


def test_createapikey_prints_the_key_alone_on_the_last_line_and_stores_a_hash(db, capsys):
    call_command("createapikey", "carol", "--plan", "enterprise")
    key = capsys.readouterr().out.strip().splitlines()[-1]
    assert key.startswith("rk_") and " " not in key
    stored = ApiKey.objects.get(account__login="carol")
    assert stored.key_hash == hash_secret(key) and key not in (stored.key_hash, stored.prefix)
    assert Owner.objects.get(login="carol").plan == "enterprise"


def test_createapikey_again_adds_a_key_and_both_work(db, capsys, api):
    call_command("createapikey", "dave")
    call_command("createapikey", "dave")
    keys = [line for line in capsys.readouterr().out.splitlines() if line.startswith("rk_")]
    assert len(set(keys)) == 2
    for key in keys:
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
        assert api.get("/api/v1/mailboxes").status_code == 200


@pytest.mark.parametrize("header", [None, "Bearer nope", "Bearer rt_nope", "Basic abc", "Bearer", "Bearer " + "x" * 5000])
def test_missing_or_bad_credentials_are_401(api, header):
    if header:
        api.credentials(HTTP_AUTHORIZATION=header)
    response = api.get("/api/v1/mailboxes")
    assert response.status_code == 401
    assert response.json()["code"] == "unauthorized"
    assert set(response.json()) == {"code", "message"}
    # RFC 6750 §3: a credential sent and refused is an invalid_token; none sent is not.
    expected = 'Bearer realm="relay", error="invalid_token"' if header else 'Bearer realm="relay"'
    assert response["WWW-Authenticate"] == expected


def test_revoked_key_is_401(client_pro):
    ApiKey.objects.update(revoked_at="2026-01-01T00:00:00Z")
    assert client_pro.get("/api/v1/mailboxes").status_code == 401


@pytest.mark.parametrize("body", [
    "{bad json",
    "[1, 2, 3]",
    '"just a string"',
    "null",
    '{"local_part": {"nested": true}}',
    '{"local_part": ' + '"' + "a" * 100_000 + '"}',
    '{"domain": ' + '"' + "d" * 100_000 + '"}',
    "\xff\xfe garbage",
    '{"local_part": ' + "[" * 100_000 + "]" * 100_000 + "}",
])
def test_malformed_json_bodies_are_400_invalid_request(client_pro, body):
    response = client_pro.generic("POST", "/api/v1/mailboxes", body.encode("utf-8", "surrogateescape"),
                                  "application/json")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_request"


def test_a_body_that_is_not_json_is_415(client_pro):
    response = client_pro.generic("POST", "/api/v1/mailboxes", b"local_part=x", "application/x-www-form-urlencoded")
    assert response.status_code == 415
    assert response.json()["code"] == "unsupported_media_type"


def test_body_over_the_upload_limit_is_413_too_large(client_pro, settings):
    body = b'{"a": "' + b"x" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE + b'"}'
    response = client_pro.generic("POST", "/api/v1/mailboxes", body, "application/json")
    assert response.status_code == 413
    assert response.json()["code"] == "too_large"


@pytest.mark.parametrize("path", ["/nope", "/api/v1/nope", "/api/v1/mailboxes/not-a-uuid",
                                  "/api/v1/mailboxes/00000000-0000-0000-0000-000000000000/messages/99999999999999999999",
                                  "/api/v1/mailboxes/00000000-0000-0000-0000-000000000000/messages/abc/raw"])
def test_unknown_routes_are_404_json(client_pro, path, settings):
    for debug in (False, True):
        settings.DEBUG = debug
        response = client_pro.get(path)
        assert response.status_code == 404
        assert response.json() == {"code": "not_found", "message": "Not found."}


def test_wrong_method_is_405_json(client_pro):
    response = client_pro.put("/api/v1/mailboxes", {}, format="json")
    assert response.status_code == 405
    assert response.json()["code"] == "method_not_allowed"


def test_send_with_bad_fields_is_400_with_fields(client_pro):
    mailbox = client_pro.post("/api/v1/mailboxes", {}, format="json").json()
    response = client_pro.post(f"/api/v1/mailboxes/{mailbox['id']}/messages",
                               {"to": "not-a-list", "subject": "x" * 2000}, format="json")
    assert response.status_code == 400
    assert {"to", "subject", "text"} <= set(response.json()["fields"])


def test_openapi_schema_and_docs_are_served(api):
    schema = api.get("/api/schema/")
    assert schema.status_code == 200
    assert b"/api/v1/mailboxes/{mailbox_id}/renew" in schema.content
    assert api.get("/api/docs/").status_code == 200


def test_whoami_names_the_owner_or_the_mailbox(client_pro, api):
    assert client_pro.get("/api/v1/whoami").json() == {"owner": "alice", "plan": "pro"}
    created = api.post("/api/v1/mailboxes", {}, format="json").json()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {created['token']}")
    assert api.get("/api/v1/whoami").json() == {"mailbox": created["id"], "plan": "free"}
