"""The storage seam: every difference between PostgreSQL (production) and SQLite (`make
run`, one file on one host) is said here once, as an operation named for what it does, so
no other module asks which database it runs on (docs/architecture.md, "One storage seam").
Migrations keep their own checks: a migration runs once, against the schema it finds."""
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone as tz
from typing import TypeVar

from django.contrib.postgres.search import SearchQuery
from django.db import connection, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_datetime

T = TypeVar("T")


def _postgresql() -> bool:
    return connection.vendor == "postgresql"


def written_out(*, postgresql: T, portable: T) -> T:
    """`postgresql`, the statements written out for PostgreSQL (its writable CTEs, arrays,
    prepared statements), where they run; elsewhere `portable`, the same rule through the
    ORM or plain SQL. Both must give the same result: the tests run the PostgreSQL one,
    `make run` the other."""
    return postgresql if _postgresql() else portable


# --- the one clock (docs/architecture.md, "One clock") -----------------------------------------
def db_now() -> datetime:
    """What two processes could disagree on is decided by the database's clock,
    PostgreSQL's clock_timestamp(); on SQLite, which is one file on one host, that host's
    clock."""
    if not _postgresql():
        return timezone.now()
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]


def clock_sql(*, seconds_later: float | None = None) -> tuple[str, list]:
    """The database's clock (plus `seconds_later`) as an SQL expression and its parameters,
    for a statement that compares with it or writes it: on PostgreSQL the statement reads
    the clock itself, with no round trip of its own."""
    if _postgresql():
        if seconds_later is None:
            return "clock_timestamp()", []
        return "clock_timestamp() + make_interval(secs => %s)", [seconds_later]
    now = db_now()
    if seconds_later is not None:
        now += timedelta(seconds=seconds_later)
    return "%s", [connection.ops.adapt_datetimefield_value(now)]


def clock_read(value) -> datetime:
    """A value clock_sql's expression gave back in a raw row, as an aware datetime (SQLite
    hands back the text it was given)."""
    if isinstance(value, str):
        value = parse_datetime(value)
        return value if timezone.is_aware(value) else timezone.make_aware(value, tz.utc)
    return value


# Any constant unlikely to clash with another advisory lock on the same database.
ADVISORY_LOCK_KEY = 0x52656C6179  # "Relay"


def serialized_now() -> datetime:
    """Inside a transaction: wait for every other transaction that called this to end, then
    the database's clock; on PostgreSQL one round trip (an advisory lock held to the
    transaction's end). SQLite has one write lock, taken by a transaction's first write: a
    caller writes before it reads what it counts."""
    if not _postgresql():
        return db_now()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s), clock_timestamp()", [ADVISORY_LOCK_KEY])
        return cursor.fetchone()[1]


# --- statements ----------------------------------------------------------------------------------
def execute_prepared(cursor, name: str, sql: str, params: list, *, first: str = "", first_params: list = ()) -> None:
    """Execute `sql` with `params` through the statement `name`, prepared on this database
    connection the first time (`first`: statements sent ahead in the same round trip, on
    PostgreSQL only). A pooler must keep a client on one server connection (PgBouncer's
    session mode). SQLite caches its own statements: `sql` runs as it is."""
    if not _postgresql():
        cursor.execute(sql, params)
        return
    # The names prepared, kept with the driver's connection they were prepared on: a
    # reconnect starts with none.
    held = getattr(connection, "relay_prepared", None)
    if held is None or held[0] is not connection.connection:
        held = connection.relay_prepared = (connection.connection, set())
    prepared = held[1]
    if name not in prepared:
        pieces = sql.split("%s")
        numbered = "".join(piece + (f"${number}" if number < len(pieces) else "")
                           for number, piece in enumerate(pieces, start=1))
        cursor.execute(f"PREPARE {name} AS {numbered}")
        prepared.add(name)
    arguments = ", ".join(["%s"] * len(params))
    cursor.execute(f"{first}EXECUTE {name}" + (f"({arguments})" if params else ""), [*first_params, *params])


def commit_unflushed() -> None:
    """Inside a transaction: its commit need not wait for the write-ahead log's flush
    (PostgreSQL's synchronous_commit off). For outcomes whose loss a lease repairs."""
    if _postgresql():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit = off")


def for_update_skip_locked(rows: QuerySet) -> QuerySet:
    """`rows` locked as read, passing over rows another transaction holds; where the
    database locks no rows (SQLite, one writer at a time), `rows` as they are, and the
    caller's conditional UPDATE is the guard."""
    if connection.features.has_select_for_update_skip_locked:
        return rows.select_for_update(skip_locked=True)
    return rows


def connection_named(name: str) -> None:
    """Name this process's database connections (PostgreSQL's pg_stat_activity shows it), so
    an operator sees whose they are. Before the first connection."""
    if _postgresql():
        connection.settings_dict.setdefault("OPTIONS", {})["application_name"] = name


def notifies() -> bool:
    """Whether the database wakes its listeners (PostgreSQL's LISTEN/NOTIFY); without it,
    those who wait poll."""
    return _postgresql()


# --- JSON and text -------------------------------------------------------------------------------
def json_list_has(field: str, item: str) -> Q:
    """Rows whose JSON list `field` holds `item`, a string of [a-z0-9_-] only (on SQLite,
    which has no JSON containment, the quoted item found in the stored list's text)."""
    if _postgresql():
        return Q(**{f"{field}__contains": [item]})
    return Q(**{f"{field}__icontains": f'"{item}"'})


def keeps_search_words() -> bool:
    """Whether stored mail's search words are kept (PostgreSQL's tsvector, written by a
    worker after storing). Without them a search reads the text itself (words_match)."""
    return _postgresql()


def words_match(words: str, *, vector: str, texts: tuple[str, ...]) -> Q:
    """Rows matching `words`: full text through the kept words (`vector`, websearch syntax,
    where any text is a valid query), or, where none are kept, `words` found in any of
    `texts`."""
    if _postgresql():
        return Q(**{vector: SearchQuery(words, config="simple", search_type="websearch")})
    found = Q()
    for text in texts:
        found |= Q(**{f"{text}__icontains": words})
    return found


# A word search's plan on PostgreSQL: bitmap scans only (so the GIN index is used; the
# planner ignores TOAST's cost) and no parallel workers.
_WORDS_PLAN = ("SET LOCAL enable_seqscan = off; SET LOCAL enable_indexscan = off;"
               " SET LOCAL max_parallel_workers_per_gather = 0")


@contextmanager
def words_plan() -> Iterator[None]:
    """Run a word search inside this: the word search's plan, for the transaction it opens."""
    if not _postgresql():
        yield
        return
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(_WORDS_PLAN)
        yield


def under_words_plan(sql: str) -> str:
    """One statement, `sql`, to run under the word search's plan in the same trip to the
    server: on PostgreSQL the settings ahead of it in one query string, which the server
    runs as one transaction of its own, so SET LOCAL lasts until the statement's end and
    no transaction is opened and committed around it (words_plan's three more trips)."""
    return f"{_WORDS_PLAN}; {sql}" if _postgresql() else sql

