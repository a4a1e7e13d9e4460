"""Statements prepared once per database connection (PostgreSQL's PREPARE), for the few
that run for every message stored: the recipient look-up, storing, the webhooks check.
Parsing and planning them anew for each message cost PostgreSQL more than running them
(docs/benchmarks.md, "SMTP ingest, round four").

A prepared statement lives as long as its connection, whatever its transactions do, and
PostgreSQL plans it again by itself when a table it reads changes. A connection pooler
that hands one client's statements to several server connections (PgBouncer in
transaction mode) loses them: point Relay at PostgreSQL itself, or at a pooler in
session mode. On other databases the statement is simply executed."""
from django.db import connection
from django.db.backends.signals import connection_created


def _forget(sender, connection, **kwargs) -> None:
    """A new connection has no statements prepared yet."""
    connection.relay_prepared = set()


connection_created.connect(_forget, dispatch_uid="relay-prepared-statements")


def execute_prepared(cursor, name: str, sql: str, params: list, *, first: str = "", first_params: list = ()) -> None:
    """Execute `sql` (with %s placeholders, none of them quoted or escaped) with `params`,
    through the statement `name` prepared on this connection the first time. `first`:
    statements sent ahead of it in the same round trip (a SET LOCAL), with
    `first_params`. `name` must differ for each different `sql`."""
    if connection.vendor != "postgresql":
        cursor.execute(sql, params)
        return
    prepared = getattr(connection, "relay_prepared", None)
    if prepared is None:
        prepared = connection.relay_prepared = set()
    if name not in prepared:
        pieces = sql.split("%s")
        numbered = "".join(piece + (f"${number}" if number < len(pieces) else "")
                           for number, piece in enumerate(pieces, start=1))
        cursor.execute(f"PREPARE {name} AS {numbered}")
        prepared.add(name)
    arguments = ", ".join(["%s"] * len(params))
    cursor.execute(f"{first}EXECUTE {name}" + (f"({arguments})" if params else ""), [*first_params, *params])
