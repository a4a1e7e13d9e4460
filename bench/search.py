"""Message search (docs/api.md) over 1,000,000 stored messages of 10 KB: GET /messages?q=word
under gunicorn (uvicorn workers) and wrk, against GET /mailboxes/{id} in the same run.
Also the size of the word index, and what each delivered message costs: stored
(message_ingest in this process), then its words written (as the worker writes them).

    scripts/bench.sh search [--messages 1000000] [--contents 2000] [--seconds 15] [--reuse] [--words zebra,quartz]

The messages belong to one owner's 10,000 mailboxes. Their texts are 2,000 distinct
10 KB bodies of words drawn from a vocabulary of 30,000 by Zipf's law (as text is: a few
words everywhere, most rare), each message under a subject of its own. Two planted words give
the searches a known number of matches: `quartz` in 1 message of 1,000 and `zebra` in 1
of 100,000.
"""
import argparse
import os
import random
import sys
import time

from bench.api import _answers, wrk
from bench.common import (command_line, cpu_seconds, fresh_database, postgres_cpu_seconds, record, setup_django, spawn,
                          stop, wait_until)
from bench.soak_parts import free_port

VOCABULARY = 30_000
MAILBOXES = 10_000


def body_text(rng: random.Random) -> str:
    words, size = [], 0
    while size < 10_000:
        # Log-uniform ranks, close to Zipf's law: half of a body's words are repeats.
        word = f"w{int(VOCABULARY ** rng.random()) - 1}"
        words.append(word)
        size += len(word) + 1
    return " ".join(words)


def fill(messages: int, contents: int) -> tuple:
    started = time.monotonic()
    key, mailbox = corpus_start(contents)
    corpus_grow(0, messages)
    print(f"filled {messages:,} messages in {time.monotonic() - started:.0f} s", flush=True)
    started = time.monotonic()
    index_size, table_size = corpus_index()
    print(f"indexed in {time.monotonic() - started:.0f} s: index {index_size}, messages {table_size}", flush=True)
    return key, mailbox, index_size, table_size


def corpus_start(contents: int) -> tuple:
    """The owner (its key) and its MAILBOXES mailboxes (the first of them), and `contents`
    distinct bodies in a temporary table of this connection, for corpus_grow."""
    from django.db import connection

    from accounts.services import account_create_with_key
    from mailboxes.models import Mailbox

    owner, key = account_create_with_key(login="bench", plan="enterprise")
    rng = random.Random(7)
    with connection.cursor() as cursor:
        cursor.execute("CREATE TEMP TABLE bodies (n int, text text, words tsvector)")
        cursor.executemany("INSERT INTO bodies (n, text) VALUES (%s, %s)",
                           [(n, body_text(rng)) for n in range(contents)])
        cursor.execute("UPDATE bodies SET words = to_tsvector('simple', text)")
        cursor.execute(
            "INSERT INTO mailboxes_mailbox (id, owner_id, address, status, created_at, expires_at, message_count, "
            " stored_bytes, backend_id, cleanup_state, cleanup_attempts, cleanup_last_error, name, tags, metadata) "
            "SELECT gen_random_uuid(), %s, 's' || i || '@relay.localhost', 'active', now(), now() + interval '7 days', "
            " 0, 0, '', '', 0, '', '', '[]', '{}' FROM generate_series(1, %s) AS i", [owner.id, MAILBOXES])
        cursor.execute("CREATE TEMP TABLE boxes AS SELECT row_number() OVER () - 1 AS n, id FROM mailboxes_mailbox")
    return key, Mailbox.objects.filter(owner=owner).first()


def corpus_grow(have: int, messages: int) -> None:
    """Messages number `have` + 1 to `messages` of corpus_start's owner, without the word
    index (dropped: built once at the end by corpus_index, faster than row by row)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT owner_id FROM mailboxes_mailbox WHERE id = (SELECT id FROM boxes WHERE n = 0)")
        owner_id = cursor.fetchone()[0]
        cursor.execute("DROP INDEX IF EXISTS content_words_gin")
        # One content per message, as ingest makes them: a body, the message's own subject,
        # and the words of both (the raw bytes are left out: search never reads them).
        cursor.execute("DROP TABLE IF EXISTS subjects")
        cursor.execute("CREATE TEMP TABLE subjects AS SELECT i, 'Order ' || i || CASE WHEN i %% 100000 = 7 "
                       " THEN ' zebra' WHEN i %% 1000 = 3 THEN ' quartz' ELSE '' END AS subject "
                       "FROM generate_series(%s, %s) AS i", [have + 1, messages])
        cursor.execute("SELECT count(*) FROM bodies")
        contents = cursor.fetchone()[0]
        cursor.execute("SELECT coalesce(max(id), 0) FROM mailboxes_messagecontent")
        first = cursor.fetchone()[0] + 1 - (have + 1)  # message i's content is first + i
        cursor.execute(
            "INSERT INTO mailboxes_messagecontent (id, raw, text, html, headers, attachments, parsed_fully, "
            " created_at, words) "
            "SELECT %s + s.i, '', b.text, '', '[]', '[]', true, now(), b.words || to_tsvector('simple', s.subject) "
            "FROM subjects s JOIN bodies b ON b.n = s.i %% %s", [first, contents])
        cursor.execute("SELECT setval(pg_get_serial_sequence('mailboxes_messagecontent', 'id'), "
                       "(SELECT max(id) FROM mailboxes_messagecontent))")
        cursor.execute(
            "INSERT INTO mailboxes_message (mailbox_id, owner_id, content_id, received_at, envelope_from, "
            " envelope_to, from_header, to_header, subject, size, has_attachments, is_read) "
            "SELECT x.id, %s, %s + s.i, now() - s.i * interval '1 second', 'sender@example.com', '', "
            " 'sender@example.com', '', s.subject, 10240, false, false "
            "FROM subjects s JOIN boxes x ON x.n = s.i %% %s", [owner_id, first, MAILBOXES])
        cursor.execute("UPDATE mailboxes_mailbox SET message_count = %s WHERE id IN (SELECT id FROM boxes)",
                       [messages // MAILBOXES])


def corpus_index() -> tuple[str, str]:
    """The index the migration makes, built over the filled table as a restore would, and
    the tables analysed; the index's size and the messages' with their contents."""
    from django.db import connection

    connection.set_autocommit(True)
    with connection.cursor() as cursor:
        cursor.execute("SET maintenance_work_mem = '1GB'")
        cursor.execute("CREATE INDEX content_words_gin ON mailboxes_messagecontent USING gin (words)")
        for table in ("mailboxes_messagecontent", "mailboxes_message", "mailboxes_mailbox"):
            cursor.execute(f"VACUUM ANALYZE {table}")
    return corpus_sizes()


def corpus_sizes() -> tuple[str, str]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_size_pretty(pg_relation_size('content_words_gin')), "
                       "pg_size_pretty(pg_total_relation_size('mailboxes_messagecontent')"
                       " + pg_total_relation_size('mailboxes_message'))")
        return cursor.fetchone()


def reuse() -> tuple:
    from django.db.models.functions import Now

    from accounts.credentials import api_key_create
    from accounts.models import Account, ApiKey
    from mailboxes.models import Mailbox

    owner = Account.objects.get(login="bench")
    # Each run makes a key: those of earlier runs are revoked, or the plan's limit stops the 21st.
    ApiKey.objects.filter(account=owner, revoked_at=None).update(revoked_at=Now())
    _, key = api_key_create(account=owner)
    return (key, Mailbox.objects.filter(owner=owner).first(), *corpus_sizes())


def ingest_cost(count: int) -> tuple[float, float]:
    """Milliseconds per 10 KB message: stored by message_ingest (which leaves the words
    owed), then its words written and indexed the way the worker writes them
    (contents_index_words, in batches)."""
    from accounts.services import account_create_with_key
    from accounts.identity import Caller
    from mailboxes.messages import contents_index_words
    from mailboxes.lifecycle import mailbox_create
    from relay.backends import get_backend
    from mailboxes.messages import recipient_by_address
    from relay.ingest import message_ingest

    name = f"ingest{random.randrange(10 ** 9)}"  # a run with --reuse makes its own
    owner, _ = account_create_with_key(login=name, plan="enterprise")
    mailbox, _ = mailbox_create(backend=get_backend(), caller=Caller(owner=owner), local_part=name, domain=None, ttl_ms=3_600_000)
    rng = random.Random(11)
    while contents_index_words():  # whatever an earlier run left owed is not this run's
        pass
    started = time.perf_counter()
    for number in range(count):
        raw = (f"From: a@example.com\r\nTo: {mailbox.address}\r\nSubject: Message {number}\r\n\r\n"
               + body_text(rng) + "\r\n").encode()
        message_ingest(raw=raw, mail_from="a@example.com", recipients=[recipient_by_address(mailbox.address)])
    stored = (time.perf_counter() - started) * 1000 / count
    started = time.perf_counter()
    while contents_index_words():
        pass
    return stored, (time.perf_counter() - started) * 1000 / count


def wrk_with_cpu(web, path: str, *, database: str | None = None, **load) -> dict:
    """wrk's figures (bench/api.py) for `path`, and where each request's time went: CPU
    milliseconds per request of the web workers (`web`, their parent), of PostgreSQL (every
    process, or the backends of `database`) and of wrk itself, which share the machine's cores."""
    parts = {"web": lambda: cpu_seconds(web.pid), "PostgreSQL": lambda: postgres_cpu_seconds(database),
             "wrk": lambda: sum(os.times()[2:4])}
    before = {name: read() for name, read in parts.items()}
    result = wrk(path, **load)
    result["cpu_ms"] = {name: (read() - before[name]) * 1000 / max(1, result["requests"])
                        for name, read in parts.items()}
    return result


def cpu(result: dict) -> str:
    """CPU per request, and the rate at which those milliseconds fill every core."""
    spent = result["cpu_ms"]
    ceiling = os.cpu_count() * 1000 / sum(spent.values())
    return (" [CPU per request: " + ", ".join(f"{name} {ms:.1f} ms" for name, ms in spent.items())
            + f"; all cores full at {ceiling:.0f} req/s]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--contents", type=int, default=2000)
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ingest", type=int, default=1000, help="messages for the ingest cost (0: skip)")
    parser.add_argument("--words", default="zebra,quartz",
                        help="the searches to measure, of zebra (~1 match in 100,000) and quartz (~1 in 1,000), "
                             "comma-separated; quartz alone on one connection is measured with quartz")
    parser.add_argument("--reuse", action="store_true",
                        help="search the messages an earlier run filled (with a new key), instead of filling again")
    args = parser.parse_args()
    searched = [word for word in args.words.split(",") if word]
    if not searched or set(searched) - {"zebra", "quartz"}:
        parser.error("--words takes zebra, quartz or both")
    if args.reuse:
        setup_django()
        key, mailbox, index_size, table_size = reuse()
    else:
        fresh_database()
        setup_django()
        key, mailbox, index_size, table_size = fill(args.messages, args.contents)
    port = free_port()  # another clone's benchmark may hold the usual one
    # BENCH_WORKER_CLASS: another gunicorn worker class to compare with Relay's (uvicorn's own, say).
    worker_class = os.environ.get("BENCH_WORKER_CLASS", "core.serving.UvicornWorker")
    web = spawn("gunicorn", [sys.executable, "-m", "gunicorn", "config.asgi", "-k", worker_class,
                             "-w", str(args.workers), "-b", f"127.0.0.1:{port}"], env={"RELAY_LOG_LEVEL": "WARNING"})
    wait_until(lambda: _answers(f"http://127.0.0.1:{port}/api/schema/"), 60, "gunicorn")
    load = dict(key=key, seconds=args.seconds, connections=args.connections, port=port)
    # PostgreSQL's CPU is its backends serving this database (the web workers keep their
    # connections), not those another engineer's benchmark keeps busy on the same machine.
    from django.db import connection

    database = connection.settings_dict["NAME"]

    def measured(path: str, **options) -> dict:
        return wrk_with_cpu(web, path, database=database, **{**load, **options})

    try:
        wrk(f"/api/v1/mailboxes/{mailbox.id}", **{**load, "seconds": 3})  # warm up every worker
        single = measured(f"/api/v1/mailboxes/{mailbox.id}")
        searches = {word: measured(f"/api/v1/messages?q={word}") for word in searched}
        # One connection: the time a search takes when nothing else queues with it.
        alone = measured("/api/v1/messages?q=quartz", connections=1) if "quartz" in searched else None
    finally:
        stop(web)
    stored, words = ingest_cost(args.ingest) if args.ingest else (0.0, 0.0)
    parts = [f"{args.messages:,} messages (word index {index_size}; messages with their contents {table_size}): "
             f"GET mailbox {single['rps']:.0f} req/s (p99 {single['p99_ms']:.1f} ms{cpu(single)})"]
    matches = {"zebra": args.messages // 100_000, "quartz": args.messages // 1000}
    for word, result in searches.items():
        parts.append(f"q={word} (~{matches[word]:,} matches) {result['rps']:.0f} req/s, p99 **{result['p99_ms']:.1f} ms**, "
                     f"ratio **{result['rps'] / single['rps']:.2f}**{cpu(result)}")
    if alone is not None:
        parts.append(f"q=quartz alone (1 connection): p99 **{alone['p99_ms']:.1f} ms**{cpu(alone)}")
    errors = single["errors"] + (alone["errors"] if alone else 0) + sum(result["errors"] for result in searches.values())
    if args.ingest:
        parts.append(f"ingest {stored:.2f} ms/message stored, then {words:.2f} ms/message to write and index its "
                     "words (the worker's batches)")
    figures = "; ".join(parts) + f"; errors {errors}"
    record("search", command_line(), figures)


if __name__ == "__main__":
    main()
