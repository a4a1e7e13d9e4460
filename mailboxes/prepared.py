"""Statements prepared once per connection for those that run for every stored message. A
pooler must keep a client on one server connection (PgBouncer's session mode)."""
from django.db import connection
from django.db.backends.signals import connection_created


def _forget(sender, connection, **kwargs) -> None:
    """A new connection has no statements prepared yet."""
    connection.relay_prepared = set()


connection_created.connect(_forget, dispatch_uid="relay-prepared-statements")


def execute_prepared(cursor, name: str, sql: str, params: list, *, first: str = "", first_params: list = ()) -> None:
    """Execute `sql` with `params` through the statement `name`, prepared on this connection
    the first time (`first`: statements sent ahead in the same round trip)."""
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
