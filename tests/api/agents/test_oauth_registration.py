"""Dynamic registration (RFC 7591) and its updates (RFC 7592) through Django's test client: one
rule for what a client may register, whichever of the two asks (docs/agents.md, "Connecting
by URL")."""
import json

from django.test import Client
from oauth2_provider.models import get_application_model

from tests.oauth_client import PAGE, allow, authorize_query, register, signed_in

CALLBACK = "https://agent.example/cb"


def metadata(**changes) -> str:
    return json.dumps({"client_name": "A test agent", "redirect_uris": [CALLBACK],
                       "token_endpoint_auth_method": "none", **changes})


def test_an_update_meets_the_registration_rule_and_no_code_goes_where_it_refused(db):
    registered = register(CALLBACK)
    client_id = registered["client_id"]
    management = Client(HTTP_AUTHORIZATION="Bearer " + registered["registration_access_token"])

    def update(**changes):
        return management.put(f"/oauth/register/{client_id}", metadata(**changes), content_type="application/json")

    def registration(**changes):
        return Client().post("/oauth/register", metadata(**changes), content_type="application/json")

    for refused in (update(redirect_uris=["http://evil.example/cb"]),
                    registration(redirect_uris=["http://evil.example/cb"])):
        assert refused.status_code == 400 and refused.json()["error"] == "invalid_redirect_uri", refused.content
    for refused in (update(grant_types=["client_credentials"]), registration(grant_types=["client_credentials"])):
        assert refused.status_code == 400 and refused.json()["error"] == "invalid_client_metadata", refused.content
    assert get_application_model().objects.get(client_id=client_id).redirect_uris == CALLBACK

    browser, _ = signed_in()
    url, _ = authorize_query(client_id, "http://evil.example/cb")
    sent = browser.get(url, **PAGE)
    assert sent.status_code == 400 and "Location" not in sent, "a code was sent where no registration may point"

    moved = update(redirect_uris=["https://agent.example/new-cb"])
    assert moved.status_code == 200 and moved.json()["redirect_uris"] == ["https://agent.example/new-cb"]
    url, _ = authorize_query(client_id, "https://agent.example/new-cb")
    assert allow(browser, url)["code"]


def test_metadata_of_the_wrong_shape_is_refused_as_a_400_never_a_500(db):
    registered = register(CALLBACK)
    management = Client(HTTP_AUTHORIZATION="Bearer " + registered["registration_access_token"])
    odd = [{"redirect_uris": ["https://[::1/cb"]}, {"grant_types": [{}]}, {"response_types": [["code"]]},
           {"redirect_uris": ["https://agent.example:99999/cb"]}]
    for changes in odd:
        for answer in (Client().post("/oauth/register", metadata(**changes), content_type="application/json"),
                       management.put(f"/oauth/register/{registered['client_id']}", metadata(**changes),
                                      content_type="application/json")):
            assert answer.status_code == 400, (changes, answer.status_code, answer.content[:200])
