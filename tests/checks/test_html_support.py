"""GET …/checks/html: the features a message's HTML uses, each client's support of them
from caniemail's data as shipped, and the scores."""
import json
import time

import pytest

from checks.html_support import DATA_FILE, features_used
from mailboxes.models import MessageContent
from tests import mail_corpus

RAW_DATA = json.loads(DATA_FILE.read_text())
BY_SLUG = {feature["slug"]: feature for feature in RAW_DATA["data"]}
SUPPORT = {"y": "yes", "a": "partial", "n": "no"}


def latest_support(slug: str) -> dict:
    """Each client's support of `slug` by its latest tested version, read from the data file."""
    found = {}
    for family, platforms in BY_SLUG[slug]["stats"].items():
        for platform, versions in platforms.items():
            value = str(list(versions.values())[-1])[:1] if versions else ""
            if value in SUPPORT:
                found[f"{family}.{platform}"] = SUPPORT[value]
    return found


def html_mail(html: str):
    return lambda to: mail_corpus.mail(to, "Styled", "plain part", html=html)


@pytest.mark.parametrize(("html", "slug"), [
    ('<div style="display:flex"><p>a</p><p>b</p></div>', "css-display-flex"),
    ('<div style="display: inline-grid; grid-template-columns: 1fr 1fr">x</div>', "css-display-grid"),
    ('<svg width="10" height="10"><circle r="4"/></svg>', "html-svg"),
    ("<style>@media (max-width: 600px) { p { font-size: 20px } }</style><p>x</p>", "css-at-media"),
    ("<style>@media (prefers-color-scheme: dark) { body { color: #fff } }</style>",
     "css-at-media-prefers-color-scheme"),
    ('<?xml version="1.0" encoding="utf-8"?><html xmlns="http://www.w3.org/1999/xhtml"><body>'
     '<div style="display:flex">x</div></body></html>', "css-display-flex"),
])
def test_a_feature_in_use_is_reported_with_each_clients_support(received, checks_of, html, slug):
    message_id = received(html_mail(html))
    response = checks_of(message_id, "html")
    assert response.status_code == 200
    body = response.json()
    reported = {feature["slug"]: feature for feature in body["features"]}
    assert slug in reported, sorted(reported)
    feature = reported[slug]
    assert feature["support"] == latest_support(slug)
    assert feature["title"] == BY_SLUG[slug]["title"] and feature["url"] == BY_SLUG[slug]["url"]
    assert feature["count"] >= 1
    assert body["data_date"] == RAW_DATA["last_update_date"][:10]
    assert {client["id"] for client in body["clients"]} >= set(feature["support"])


def test_the_score_is_the_share_of_uses_supported(received, checks_of):
    # Three divs, each display:flex with a gap, and nothing else: each client's score is the
    # share of those nine uses it supports (partial counting half), recomputed here from the
    # data file; a family's and overall, the share supported of the uses tested in all their
    # clients (the data has tested gap in fewer clients than flex: those weigh less).
    html = "".join('<div style="display:flex;gap:0">x</div>' for _ in range(3))
    body = checks_of(received(html_mail(html)), "html").json()
    flex = next(feature for feature in body["features"] if feature["slug"] == "css-display-flex")
    assert flex["count"] == 3
    weights = {"yes": 1.0, "partial": 0.5, "no": 0.0}
    uses = {"css-display-flex": 3, "css-gap": 3, "html-div": 3}
    support = {slug: latest_support(slug) for slug in uses}
    clients = {client["id"]: client["family"] for client in body["clients"]}
    scores, supported, tested_uses = {}, {}, {}
    for client in clients:
        known = [(count, weights[support[slug][client]]) for slug, count in uses.items() if client in support[slug]]
        if known:
            supported[client] = sum(count * weight for count, weight in known)
            tested_uses[client] = sum(count for count, _ in known)
            scores[client] = supported[client] / tested_uses[client]
    assert any(count < 9 for count in tested_uses.values()), "a client the data has tested on part of the message"
    expected = {"overall": round(sum(supported.values()) / sum(tested_uses.values()), 3)}
    for family in set(clients.values()):
        members = [client for client, of in clients.items() if of == family and client in scores]
        if members:
            expected[family] = round(sum(supported[c] for c in members) / sum(tested_uses[c] for c in members), 3)
    assert body["score"] == expected
    assert body["score"]["outlook"] < 1.0, "Outlook on Windows has no flex"
    # What each score rests on: the share of the nine uses the data has tested in the client.
    tested = {client: sum(count for slug, count in uses.items() if client in support[slug]) / 9 for client in scores}
    expected_tested = {"overall": round(sum(tested.values()) / len(tested), 3)}
    for family in set(clients.values()):
        members = [tested[client] for client, of in clients.items() if of == family and client in tested]
        if members:
            expected_tested[family] = round(sum(members) / len(members), 3)
    assert body["tested"] == expected_tested and set(body["tested"]) == set(body["score"])


def test_the_newsletter_of_the_corpus(received, checks_of):
    body = checks_of(received(mail_corpus.newsletter), "html").json()
    slugs = {feature["slug"] for feature in body["features"]}
    assert {"css-display-flex", "css-display-grid", "html-svg", "css-at-media", "css-at-media-prefers-color-scheme",
            "image-webp", "css-pseudo-class-hover", "html-meta-color-scheme"} <= slugs
    assert body["score"]["gmail"] is not None and body["score"]["overall"] < 1


def test_a_message_without_html_has_no_features_and_no_score(received, checks_of):
    body = checks_of(received(mail_corpus.plain), "html").json()
    assert body["features"] == [] and body["score"] is None and body["tested"] is None


def test_a_five_megabyte_html_mail_is_checked_in_bounded_time(received, checks_of):
    row = ('<tr><td style="padding:4px;color:#333;font-family:Arial" class="c{0}"><a href="https://shop.example/{0}" '
           'style="display:flex">item {0}</a><img src="https://cdn.example/{0}.png"></td></tr>')
    html = "<table>" + "".join(row.format(index % 500) for index in range(36_000)) + "</table>"
    assert len(html) > 5_000_000
    message_id = received(html_mail(html))
    started = time.monotonic()
    body = checks_of(message_id, "html").json()
    elapsed = time.monotonic() - started
    flex = next(feature for feature in body["features"] if feature["slug"] == "css-display-flex")
    assert flex["count"] == 36_000
    assert elapsed < 30, f"a 5 MB mail took {elapsed:.1f} s"


def test_another_owners_message_is_not_found(received, make_client, box):
    message_id = received(mail_corpus.newsletter)
    stranger = make_client("mallory")
    for kind in ("html", "headers", "spam", "links"):
        response = stranger.get(f"/api/v1/mailboxes/{box['id']}/messages/{message_id}/checks/{kind}")
        assert response.status_code == 404 and response.json()["code"] == "not_found", kind
    assert stranger.post(f"/api/v1/mailboxes/{box['id']}/messages/{message_id}/checks/links").status_code == 404


def test_another_mailboxs_message_id_is_not_found(client_pro, received, new_box):
    message_id = received(mail_corpus.newsletter)
    other = new_box()
    response = client_pro.get(f"/api/v1/mailboxes/{other['id']}/messages/{message_id}/checks/html")
    assert response.status_code == 404


def test_css_nested_thousands_deep_is_checked_not_refused(received, checks_of):
    # Deeper than Python's call stack: @media inside @media, calc() inside calc().
    depth = 20_000
    html = ("<style>" + "@media screen {" * depth + "p { color: red }" + "}" * depth + "</style>"
            + '<p style="width:' + "calc(" * depth + "1px" + ")" * depth + '">x</p>')
    response = checks_of(received(html_mail(html)), "html")
    assert response.status_code == 200
    reported = {feature["slug"]: feature["count"] for feature in response.json()["features"]}
    assert reported["css-at-media"] == depth and reported["css-unit-calc"] == depth


def test_an_element_of_tens_of_thousands_of_attributes_ends_the_html_checked():
    # libxml2 compares each attribute with the element's earlier ones: quadratic, unless cut.
    attributes = " ".join(f"a{index}=1" for index in range(40_000))
    started = time.process_time()
    used = features_used(f'<div style="display:flex">x</div><p {attributes} role="x">y</p><svg></svg>')
    spent = time.process_time() - started
    assert spent < 3.0, f"took {spent:.1f} s of CPU"
    assert used["css-display-flex"] == 1
    assert "html-role" not in used and "html-svg" not in used, "the HTML after the cut was checked"


def test_the_check_is_made_once_per_content(received, checks_of):
    message_id = received(html_mail('<p style="display:flex">x</p>'))
    first = checks_of(message_id, "html").json()
    MessageContent.objects.filter(messages__id=message_id).update(raw=b"Content-Type: text/html\r\n\r\n<svg></svg>")
    assert checks_of(message_id, "html").json() == first, "the HTML was checked again"
