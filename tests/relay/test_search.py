"""Finding mail (docs/api.md): GET /messages over all the caller's mailboxes and the filters
of GET /mailboxes/{id}/messages: words (PostgreSQL full-text search), sender, subject,
time bounds, unread; never another owner's message."""
import smtplib
import threading
import time
from datetime import timedelta
from functools import partial

import psycopg2
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounts.identity import Caller
from api.serializers import MessageSummarySerializer
from mailboxes.models import Mailbox, Message, MessageContent
from relay.reading import message_search
from relay.reading import OwnerWordSearch, words_search_plan
from tests.conftest import _test_database_url
from tests.helpers import create_via_api, deliver, earlier, listed, row_held, wait_until
from tests.mail_corpus import mail

# A shop's mail to one of alice's mailboxes.
shop_mail = partial(mail, "you@relay.localhost", sender="Shop <news@shop.example>")


def subjects(response) -> list[str]:
    return listed(response, "subject")


@pytest.fixture
def inbox(client_pro):
    """Two of alice's mailboxes with four messages delivered a minute apart, oldest first."""
    start = timezone.now()
    first = create_via_api(client_pro, local_part="first", ttl_ms=3_600_000).json()
    second = create_via_api(client_pro, local_part="second", ttl_ms=3_600_000).json()
    letters = [
        (first, "Your login code", "Use 193-847 to sign in.", "news@shop.example"),
        (first, "Bestätigung", "Hallo Müller, bitte bestätigen.", "info@bank.example"),
        (second, "Invoice 7", "Your invoice total is 20 EUR.", "billing@shop.example"),
        (second, "Welcome aboard", "Thanks for signing up: your code is 551100.", "hello@app.example"),
    ]
    for minute, (mailbox, subject, body, sender) in enumerate(letters):
        deliver(shop_mail(subject, body, sender=f"Shop <{sender}>"), mailbox["address"], mail_from=sender)
        # received_at is the database's clock's, which no test can move: the rows are set
        # a minute apart instead.
        Message.objects.filter(subject=subject).update(received_at=start + timedelta(minutes=minute))
    return {"first": first, "second": second, "start": start}


def test_words_match_in_the_subject_and_the_text_across_mailboxes(client_pro, inbox):
    assert subjects(client_pro.get("/api/v1/messages?q=invoice")) == ["Invoice 7"]
    assert subjects(client_pro.get("/api/v1/messages?q=code")) == ["Welcome aboard", "Your login code"]
    assert subjects(client_pro.get("/api/v1/messages", {"q": "193-847"})) == ["Your login code"]
    assert subjects(client_pro.get("/api/v1/messages", {"q": "Müller"})) == ["Bestätigung"]
    assert subjects(client_pro.get("/api/v1/messages", {"q": "your code"})) == ["Welcome aboard", "Your login code"]
    assert subjects(client_pro.get("/api/v1/messages", {"q": '"your code"'})) == ["Welcome aboard"]
    results = client_pro.get("/api/v1/messages?q=invoice").json()["results"]
    assert results[0]["mailbox_id"] == inbox["second"]["id"]


def test_a_word_search_counts_with_its_page_in_one_query_and_pages_as_any_list(client_pro, inbox):
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        first = client_pro.get("/api/v1/messages", {"q": "your", "page_size": 2})
    assert subjects(first) == ["Welcome aboard", "Invoice 7"]
    body = first.json()
    assert body["count"] == 3 and body["previous"] is None and "page=2" in body["next"]
    assert not [q for q in queries.captured_queries if q["sql"].startswith("SELECT COUNT(*)")], "no count apart"
    second = client_pro.get("/api/v1/messages", {"q": "your", "page_size": 2, "page": 2})
    assert subjects(second) == ["Your login code"] and second.json()["count"] == 3 and second.json()["next"] is None
    assert client_pro.get("/api/v1/messages", {"q": "your", "page_size": 2, "page": 3}).status_code == 404
    nothing = client_pro.get("/api/v1/messages", {"q": "absent"})
    assert nothing.status_code == 200 and nothing.json()["count"] == 0 and nothing.json()["results"] == []
    assert client_pro.get("/api/v1/messages", {"q": "absent", "page": 2}).status_code == 404


def test_sender_subject_and_time_bounds(client_pro, inbox):
    assert subjects(client_pro.get("/api/v1/messages?from=shop.example")) == ["Invoice 7", "Your login code"]
    assert subjects(client_pro.get("/api/v1/messages?from=info@bank")) == ["Bestätigung"]
    assert subjects(client_pro.get("/api/v1/messages?subject=WELCOME")) == ["Welcome aboard"]
    since = (inbox["start"] + timedelta(seconds=90)).isoformat()
    until = (inbox["start"] + timedelta(seconds=150)).isoformat()
    assert subjects(client_pro.get("/api/v1/messages", {"since": since})) == ["Welcome aboard", "Invoice 7"]
    assert subjects(client_pro.get("/api/v1/messages", {"since": since, "until": until})) == ["Invoice 7"]


def test_unread_leaves_out_what_was_read(client_pro, inbox):
    read = Message.objects.get(subject="Invoice 7")
    assert client_pro.get(f"/api/v1/mailboxes/{inbox['second']['id']}/messages/{read.id}").status_code == 200
    assert subjects(client_pro.get("/api/v1/messages?unread=true")) == ["Welcome aboard", "Bestätigung",
                                                                         "Your login code"]
    assert len(subjects(client_pro.get("/api/v1/messages?unread=false"))) == 4


def test_the_filters_work_within_one_mailbox(client_pro, inbox):
    first = f"/api/v1/mailboxes/{inbox['first']['id']}/messages"
    assert subjects(client_pro.get(first, {"q": "code"})) == ["Your login code"]
    assert subjects(client_pro.get(first, {"from": "bank"})) == ["Bestätigung"]
    assert subjects(client_pro.get(first)) == ["Bestätigung", "Your login code"]


def test_messages_of_expired_mailboxes_are_found_while_kept(client_pro, inbox):
    ids = [inbox["first"]["id"], inbox["second"]["id"]]
    earlier(Mailbox.objects.filter(id__in=ids), timedelta(hours=2), "expires_at")
    assert subjects(client_pro.get("/api/v1/messages?q=invoice")) == ["Invoice 7"]
    # The one mailbox's own list is for live mailboxes only, as before.
    assert client_pro.get(f"/api/v1/mailboxes/{inbox['second']['id']}/messages?q=invoice").status_code == 410


def test_no_filter_ever_shows_another_owners_message(client_pro, make_client, inbox):
    bob = make_client("bob")
    theirs = create_via_api(bob, local_part="bobs", ttl_ms=3_600_000).json()
    deliver(shop_mail("Invoice 8", "Bob's invoice, with code 551100."), theirs["address"])
    for query in ("q=invoice", "q=551100", "from=shop", "subject=invoice", "unread=true"):
        assert "Invoice 8" not in subjects(client_pro.get(f"/api/v1/messages?{query}")), query
        assert subjects(bob.get(f"/api/v1/messages?{query}")) in ([], ["Invoice 8"]), query
    assert client_pro.get(f"/api/v1/mailboxes/{theirs['id']}/messages?q=invoice").status_code == 404


def test_a_mailbox_token_searches_its_own_mailbox_only(api, client_pro, inbox):
    anonymous = create_via_api(api, ttl_ms=600_000).json()
    deliver(shop_mail("Invoice 9", "An invoice for the anonymous mailbox."), anonymous["address"])
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {anonymous['token']}")
    assert subjects(api.get("/api/v1/messages?q=invoice")) == ["Invoice 9"]


@pytest.mark.parametrize("query, field", [
    ("since=yesterday", "since"),
    ("until=2026-02-30T00:00:00Z", "until"),
    ("unread=maybe", "unread"),
    ("q=" + "x" * 201, "q"),
])
def test_bad_values_are_a_400_naming_them(client_pro, query, field):
    response = client_pro.get(f"/api/v1/messages?{query}")
    assert response.status_code == 400 and field in response.json()["fields"]


@pytest.mark.parametrize("words", ["' \" & | ! ( :*", "-", "or", '"unclosed', "a:* & !b", "\\"])
def test_any_text_is_a_valid_query(client_pro, inbox, words):
    assert client_pro.get("/api/v1/messages", {"q": words}).status_code == 200


@pytest.mark.django_db(transaction=True)  # ANALYZE must see the rows committed
def test_words_are_found_through_the_gin_index_once_the_table_is_large(client_pro, inbox):
    # The owner gets 200 more mailboxes of 100 messages each, none with the word searched for.
    owner = Message.objects.get(subject="Invoice 7").mailbox.owner
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO mailboxes_mailbox (id, owner_id, address, status, created_at, expires_at, message_count, "
            " stored_bytes, backend_id, cleanup_state, cleanup_attempts, cleanup_last_error, name, tags, metadata) "
            "SELECT gen_random_uuid(), %s, 'filler' || i || '@relay.localhost', 'active', now(), "
            " now() + interval '1 hour', 100, 0, '', '', 0, '', '', '[]', '{}' FROM generate_series(1, 200) AS i",
            [owner.id])
        # Fifteen words each from a skewed vocabulary of 5,000, as text is: common words
        # and rare ones, which is what the planner's word statistics need to see.
        cursor.execute(
            "INSERT INTO mailboxes_messagecontent (raw, text, html, headers, attachments, parsed_fully, created_at, "
            " words) "
            "SELECT '', '', '', '[]', '[]', true, now(), "
            " to_tsvector('simple', (SELECT string_agg('w' || floor(power(random(), 3) * 5000)::int, ' ') "
            "  FROM generate_series(1, 15) WHERE i > 0)) FROM generate_series(1, 20000) AS i")
        cursor.execute(
            "INSERT INTO mailboxes_message (mailbox_id, owner_id, content_id, received_at, envelope_from, "
            " envelope_to, from_header, to_header, subject, size, has_attachments, is_read) "
            "SELECT m.id, m.owner_id, c.id, now(), '', '', '', '', 'filler', 10, false, false "
            "FROM (SELECT id, owner_id, row_number() OVER () AS n FROM mailboxes_mailbox"
            "      WHERE address LIKE 'filler%%') m "
            "JOIN (SELECT id, row_number() OVER () AS n FROM mailboxes_messagecontent WHERE text = '') c "
            " ON (c.n - 1) / 100 = m.n - 1")
        cursor.execute("ANALYZE mailboxes_mailbox")
        cursor.execute("ANALYZE mailboxes_messagecontent")
        cursor.execute("ANALYZE mailboxes_message")
    assert Message.objects.filter(subject="filler").count() == 20_000
    # As the API runs a word search (relay.reading.words_search_plan): a rare word,
    # and a word in most messages, both through the index.
    with words_search_plan("invoice"):
        rare = message_search(caller=Caller(owner=owner), words="invoice")
        assert "content_words_gin" in rare.explain()
        assert [message.subject for message in rare] == ["Invoice 7"]
        common = message_search(caller=Caller(owner=owner), words="w1")
        assert "content_words_gin" in common.explain()
        assert common.count() > 1000
        # The same searches as the API makes them for an owner (OwnerWordSearch): the
        # written-out statement goes through the index too.
        for words in ("invoice", "w1"):
            with connection.cursor() as cursor:
                cursor.execute("EXPLAIN " + OwnerWordSearch.PAGE, [owner.id, words, 50, 0])
                assert "content_words_gin" in "\n".join(row[0] for row in cursor.fetchall())
        assert [message.subject for message in OwnerWordSearch(owner_id=owner.id, words="invoice")
                .page_with_total(0, 50)] == ["Invoice 7"]


def test_waiting_takes_the_search_filters(client_pro, inbox):
    messages = f"/api/v1/mailboxes/{inbox['first']['id']}/messages"
    response = client_pro.get(f"{messages}?wait=1&q=code&from=shop")
    assert subjects(response) == ["Your login code"]
    started = time.monotonic()
    assert subjects(client_pro.get(f"{messages}?wait=1&subject=invoice")) == []  # nothing matches: the wait runs out
    assert time.monotonic() - started >= 0.9


def test_empty_values_are_malformed_not_absent(client_pro, inbox):
    for query, field in (("until=", "until"), ("since=", "since"), ("unread=", "unread")):
        response = client_pro.get(f"/api/v1/messages?{query}")
        assert response.status_code == 400 and field in response.json()["fields"], query
    for query, field in (("status=", "status"), ("ordering=", "ordering"), ("created_after=", "created_after")):
        response = client_pro.get(f"/api/v1/mailboxes?{query}")
        assert response.status_code == 400 and field in response.json()["fields"], query


# --- words owed at ingest, written by a worker or by the first search that needs them -------
def _words_written(message_id: int) -> bool:
    return Message.objects.filter(id=message_id, content__words__isnull=False).exists()


def test_smtp_leaves_the_words_owed_and_a_search_writes_them_first(client_pro, inbox):
    # What SMTP stores: the message without its words, which are the costly part.
    [owed] = deliver(shop_mail("Parcel 42", "Your parcel tracking number is 8841."), inbox["first"]["address"])
    assert not _words_written(owed)
    # A search finds it anyway, at once: it writes the words its scope owes first.
    assert subjects(client_pro.get("/api/v1/messages", {"q": "tracking"})) == ["Parcel 42"]
    assert _words_written(owed)
    # The words are those the subject and text would have had at ingest.
    with connection.cursor() as cursor:
        cursor.execute("SELECT c.words = to_tsvector('simple', 'Parcel 42' || ' ' || c.text) FROM"
                       " mailboxes_messagecontent c JOIN mailboxes_message m ON m.content_id = c.id WHERE m.id = %s",
                       [owed])
        assert cursor.fetchone() == (True,)


def test_an_owners_word_search_asks_whether_words_are_owed_in_its_own_statement(client_pro, make_client, inbox):
    # The inbox's mail came over SMTP and owes its words: the first search writes them.
    assert subjects(client_pro.get("/api/v1/messages", {"q": "code"})) == ["Welcome aboard", "Your login code"]
    # Nothing owed now: the search's one statement both asks and answers (no trip to ask first).
    with CaptureQueriesContext(connection) as queries:
        assert subjects(client_pro.get("/api/v1/messages", {"q": "invoice"})) == ["Invoice 7"]
    asked = [q["sql"] for q in queries.captured_queries if "words IS NULL" in q["sql"]]
    assert len(asked) == 1 and "relay_total" in asked[0]
    # Another owner's message owes its words: not alice's search's to write. Her matches
    # are still all there in one statement, and a search with none is still an empty page
    # (the statement's one row is the flag alone).
    bob = make_client("bob", plan="pro")
    [owed_elsewhere] = deliver(shop_mail("Invoice 8", "Bob's invoice."),
                               create_via_api(bob, ttl_ms=3_600_000).json()["address"])
    with CaptureQueriesContext(connection) as queries:
        assert subjects(client_pro.get("/api/v1/messages", {"q": "invoice"})) == ["Invoice 7"]
    assert len([q for q in queries.captured_queries if "words IS NULL" in q["sql"]]) == 1
    nothing = client_pro.get("/api/v1/messages", {"q": "absent"})
    assert nothing.status_code == 200 and nothing.json()["count"] == 0 and nothing.json()["results"] == []
    assert not _words_written(owed_elsewhere)
    # Bob's search writes them.
    assert subjects(bob.get("/api/v1/messages", {"q": "invoice"})) == ["Invoice 8"]
    assert _words_written(owed_elsewhere)
    # One of alice's own owes them: found, counted with the rest, its words written.
    [owed] = deliver(shop_mail("Invoice 9", "A second invoice."), inbox["first"]["address"])
    assert not _words_written(owed)
    body = client_pro.get("/api/v1/messages", {"q": "invoice"}).json()
    assert sorted(row["subject"] for row in body["results"]) == ["Invoice 7", "Invoice 9"] and body["count"] == 2
    assert _words_written(owed)


def test_a_waiting_search_finds_a_message_whose_words_are_owed(client_pro, inbox):
    mailbox = inbox["first"]
    [owed] = deliver(shop_mail("Reset", "Your reset token is QX7731."), mailbox["address"])
    response = client_pro.get(f"/api/v1/mailboxes/{mailbox['id']}/messages", {"wait": 1, "q": "token"})
    assert subjects(response) == ["Reset"]


def test_an_html_only_messages_words_are_its_readable_text(client_pro, inbox):
    raw = (f"From: a@example.com\r\nTo: {inbox['second']['address']}\r\nSubject: Styled\r\n"
           "Content-Type: text/html\r\n\r\n<style>.hidden{}</style><p>Your <b>voucher</b> awaits</p>\r\n").encode()
    deliver(raw, inbox["second"]["address"])
    assert subjects(client_pro.get("/api/v1/messages", {"q": "voucher"})) == ["Styled"]
    assert subjects(client_pro.get("/api/v1/messages", {"q": "hidden"})) == []


@pytest.mark.django_db(transaction=True)
def test_the_worker_writes_owed_words_in_batches_and_passes_over_those_held(make_client):
    from mailboxes.messages import contents_index_words

    client = make_client("alice", plan="pro")
    mailbox = create_via_api(client, ttl_ms=3_600_000).json()
    ids = [deliver(shop_mail(f"Note {n}", f"body {n}"), mailbox["address"])[0] for n in range(3)]
    held_content = Message.objects.get(id=ids[1]).content_id
    with row_held(MessageContent, held_content):  # another worker (or a search) in the middle of writing it
        assert contents_index_words(skip_locked=True, limit=1) == 1  # a batch of one: the oldest
        assert contents_index_words(skip_locked=True) == 1  # the third; the held one is passed over
        assert [_words_written(id) for id in ids] == [True, False, True]
    assert contents_index_words(skip_locked=True) == 1
    assert contents_index_words(skip_locked=True) == 0
    assert all(_words_written(id) for id in ids)


@pytest.mark.django_db(transaction=True)
def test_a_search_waits_for_a_worker_writing_its_words_and_does_not_write_them_again(make_client):
    client = make_client("alice", plan="pro")
    mailbox = create_via_api(client, ttl_ms=3_600_000).json()
    [message_id] = deliver(shop_mail("Shipped", "Your order has shipped."), mailbox["address"])
    content_id = Message.objects.get(id=message_id).content_id
    worker = psycopg2.connect(_test_database_url())
    try:
        # A worker has locked the content and is writing its words (not committed yet).
        cursor = worker.cursor()
        cursor.execute("SELECT id FROM mailboxes_messagecontent WHERE id = %s FOR UPDATE", [content_id])
        cursor.execute("SELECT pg_backend_pid()")
        worker_pid = cursor.fetchone()[0]
        cursor.execute("UPDATE mailboxes_messagecontent SET words = to_tsvector('simple', 'Shipped' || ' ' || text)"
                       " WHERE id = %s", [content_id])
        answers = []

        def search() -> None:
            from django.db import connections

            try:
                answers.append(client.get("/api/v1/messages", {"q": "shipped"}))
            finally:
                connections.close_all()

        searcher = threading.Thread(target=search)
        searcher.start()
        # The search waits on the worker's lock ...
        wait_until(lambda: _blocked_by(worker_pid), timeout=10, message="the search to wait for the worker")
        assert searcher.is_alive()
        cursor.execute("SELECT txid_current()")
        worker_txid = cursor.fetchone()[0]
        worker.commit()  # ... which commits its words
        searcher.join(10)
    finally:
        worker.close()
    assert subjects(answers[0]) == ["Shipped"]
    # The row is the worker's version: the search found the words written and left them.
    with connection.cursor() as cursor:
        cursor.execute("SELECT xmin::text::bigint FROM mailboxes_messagecontent WHERE id = %s", [content_id])
        assert cursor.fetchone()[0] == worker_txid % 2 ** 32


def _blocked_by(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", [pid])
        return cursor.fetchone()[0] > 0


def test_a_worker_writes_the_words_of_mail_received_over_smtp(processes, smtp_server, make_client, monkeypatch):
    from relay import ingest

    monkeypatch.setattr(ingest, "_words_next_publish", 0.0)  # no ask held back by an earlier test's
    processes.worker("worker")
    processes.wait_ready()
    client = make_client("alice", plan="pro")
    mailbox = create_via_api(client, ttl_ms=3_600_000).json()
    with smtplib.SMTP("127.0.0.1", smtp_server.port, timeout=10) as smtp:
        smtp.sendmail("a@example.com", [mailbox["address"]], shop_mail("Hello", "a word for the index"))
    message = Message.objects.get(mailbox_id=mailbox["id"])
    # Nobody searches: the worker, asked for after the 250, writes the words.
    wait_until(lambda: _words_written(message.id), timeout=20, message="the worker to write the words")
    # Its log line follows the commit the words came with.
    wait_until(lambda: "wrote the search words of 1 stored message(s)" in processes.log("worker"), timeout=10,
               message="the worker to say so")


def test_a_query_of_only_whitespace_filters_nothing_and_a_line_break_is_refused(client_pro, inbox):
    everything = subjects(client_pro.get("/api/v1/messages"))
    assert len(everything) == 4
    for blank in ("  ", "\t"):
        assert subjects(client_pro.get("/api/v1/messages", {"q": blank, "subject": blank})) == everything, repr(blank)
    for broken in ("\n", "a\rb", "\x0b", "a\u2028b"):  # every character a line breaker splits on
        response = client_pro.get("/api/v1/messages", {"q": broken})
        assert response.status_code == 400 and "q" in response.json()["fields"], repr(broken)


# --- after=MID on every list, with or without wait (docs/api.md) ---------------------------------
def ids_of(response) -> list[int]:
    return listed(response, "id")


def test_after_without_wait_lists_only_what_came_after_on_a_mailboxs_list(client_pro, inbox):
    url = f"/api/v1/mailboxes/{inbox['first']['id']}/messages"
    newest_first = ids_of(client_pro.get(url))
    assert len(newest_first) == 2
    assert ids_of(client_pro.get(url, {"after": newest_first[1]})) == newest_first[:1]
    assert ids_of(client_pro.get(url, {"after": newest_first[0]})) == []
    assert client_pro.get(url, {"after": newest_first[1]}).json()["count"] == 1


def test_after_without_wait_on_the_list_of_all_messages(client_pro, inbox):
    everything = ids_of(client_pro.get("/api/v1/messages"))
    oldest = everything[-1]
    assert ids_of(client_pro.get("/api/v1/messages", {"after": oldest})) == everything[:-1]
    assert ids_of(client_pro.get("/api/v1/messages", {"after": oldest, "q": "code"})) == [everything[0]]


def test_after_naming_a_message_of_another_mailbox_is_400_naming_after(client_pro, make_client, inbox):
    in_second = ids_of(client_pro.get(f"/api/v1/mailboxes/{inbox['second']['id']}/messages"))[0]
    response = client_pro.get(f"/api/v1/mailboxes/{inbox['first']['id']}/messages", {"after": in_second})
    assert response.status_code == 400 and "after" in response.json()["fields"]
    response = client_pro.get(f"/api/v1/mailboxes/{inbox['first']['id']}/messages", {"after": 10 ** 17})
    assert response.status_code == 400 and "after" in response.json()["fields"]
    # Another owner's message is not one of "these messages" either, on the list of all.
    stranger = make_client("mallory", "pro")
    response = stranger.get("/api/v1/messages", {"after": in_second})
    assert response.status_code == 400 and "after" in response.json()["fields"]


def test_a_deleted_mailboxs_mail_leaves_the_owners_searches_and_new_mail_joins_them(client_pro, inbox):
    assert client_pro.delete(f"/api/v1/mailboxes/{inbox['second']['id']}").status_code == 204
    assert subjects(client_pro.get("/api/v1/messages?q=invoice")) == []
    assert subjects(client_pro.get("/api/v1/messages")) == ["Bestätigung", "Your login code"]
    # The rows stay until purged; only the owner's searches stop naming them.
    assert Message.objects.filter(mailbox_id=inbox["second"]["id"]).count() == 2
    third = create_via_api(client_pro, local_part="third", ttl_ms=3_600_000).json()
    deliver(shop_mail("Invoice 10", "A new invoice."), third["address"])
    assert subjects(client_pro.get("/api/v1/messages?q=invoice")) == ["Invoice 10"]


@pytest.mark.parametrize("words", ["your", "code", '"your code"', "your -invoice", "invoice or welcome", "müller",
                                   "absent", "' \" & | ! ( :*"])
def test_an_owners_word_search_is_written_out_with_the_orms_rows_and_count(client_pro, inbox, words):
    owner = Mailbox.objects.get(id=inbox["first"]["id"]).owner
    search = OwnerWordSearch(owner_id=owner.id, words=words)
    expected = [message.id for message in message_search(caller=Caller(owner=owner), words=words)]
    for size in (1, 2, 50):
        for offset in range(0, len(expected) + 1, size):
            page = search.page_with_total(offset, size)
            assert [message.id for message in page] == expected[offset:offset + size]
            assert all(message.relay_total == len(expected) for message in page)
    # The API answers an owner's word search with it, and gives the same page.
    with CaptureQueriesContext(connection) as queries:
        response = client_pro.get("/api/v1/messages", {"q": words, "page_size": 2})
    assert [row["id"] for row in response.json()["results"]] == expected[:2]
    assert response.json()["count"] == len(expected)
    assert any("count(*) OVER () AS relay_total" in query["sql"] for query in queries.captured_queries)


def test_a_search_with_more_than_words_or_in_one_mailbox_goes_through_the_orm(client_pro, inbox):
    for query in ({"q": "your", "from": "shop.example"}, {"q": "your", "unread": "true"}):
        with CaptureQueriesContext(connection) as queries:
            response = client_pro.get("/api/v1/messages", query)
        assert response.status_code == 200 and response.json()["count"] >= 1
        assert not any("count(*) OVER () AS relay_total" in q["sql"] for q in queries.captured_queries)
    box = inbox["first"]["id"]
    with CaptureQueriesContext(connection) as queries:
        assert subjects(client_pro.get(f"/api/v1/mailboxes/{box}/messages", {"q": "your"})) == ["Your login code"]
    assert not any("count(*) OVER () AS relay_total" in q["sql"] for q in queries.captured_queries)


def test_an_owners_word_search_renders_each_message_as_a_list_of_the_models_does(client_pro, inbox):
    # Every field the list shows, and those read from more than one column (the sender) or
    # decoded (a sandbox catch's recipients), held to DRF's rendering of the model itself.
    Message.objects.filter(subject="Your login code").update(rcpt_to=["a@x.example", "b@x.example"], thread=None,
                                                             is_read=True)
    Message.objects.filter(subject="Welcome aboard").update(from_header="")
    # The first search writes the words the mail still owes and reads the page again; the
    # second finds none owed: both ways of reading the page.
    answers, wrote_words = [], []
    for _ in range(2):
        with CaptureQueriesContext(connection) as queries:
            answers.append(client_pro.get("/api/v1/messages", {"q": "your"}).json()["results"])
        assert any("count(*) OVER () AS relay_total" in query["sql"] for query in queries.captured_queries)
        wrote_words.append(any("SET words = to_tsvector" in query["sql"] for query in queries.captured_queries))
    assert wrote_words == [True, False]
    results = answers[1]
    ids = [row["id"] for row in results]
    messages = sorted(Message.objects.filter(id__in=ids), key=lambda message: ids.index(message.id))
    assert len(results) == 3
    assert answers[0] == results == MessageSummarySerializer(messages, many=True).data
    shown = {row["subject"]: row for row in results}
    assert shown["Your login code"]["rcpt_to"] == ["a@x.example", "b@x.example"]
    assert shown["Welcome aboard"]["from"] == "hello@app.example"  # the envelope sender, with no From header
