"""Statements prepared once per database connection: parsing and planning the statements
that run for every message cost more than running them (docs/architecture.md, "SMTP in")."""
from django.db import connection


def execute_prepared(cursor, name: str, sql: str, params: list, *, first: str = "", first_params: list = ()) -> None:
    """Execute `sql` with `params` through the statement `name`, prepared on this database
    connection the first time (`first`: statements sent ahead in the same round trip). A
    pooler must keep a client on one server connection (PgBouncer's session mode)."""
    if connection.vendor != "postgresql":
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
