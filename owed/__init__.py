"""Owed work: the one rule (take, settle, release, dead letter, retry delay) for every row
that records something Relay still has to do (docs/architecture.md, "Owed work"). Its
leases are judged by the database's clock (core.clock)."""
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from celery.utils.time import get_exponential_backoff_interval
from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Model, Q

from core.clock import db_now
from core.storage import clock_sql, for_update_skip_locked

ERROR_MAX_CHARS = 2000


@dataclass(frozen=True)
class OwedWork:
    """One kind of owed work: its model, the names of its bookkeeping fields, and the names
    of the settings its rule reads (read at call time, so a test's override applies)."""

    model: type[Model]
    state: str  # the field holding the state
    owed: str  # waiting for a run
    running: str  # held by a run; the same as `owed` where only the claim marks a hold
    dead: str  # given up, waiting for an operator
    max_retries_setting: str
    backoff_setting: str
    backoff_max_setting: str
    lease_setting: str  # how long a take holds the row
    prefix: str = ""  # of the fields claim, lease_until, attempts, last_error
    # The names of those four fields, the prefix put before each.
    claim: str = field(init=False)
    lease_until: str = field(init=False)
    attempts: str = field(init=False)
    last_error: str = field(init=False)

    def __post_init__(self) -> None:
        for name in ("claim", "lease_until", "attempts", "last_error"):
            object.__setattr__(self, name, self.prefix + name)

    def max_retries(self) -> int:
        return getattr(settings, self.max_retries_setting)

    def backoff_seconds(self) -> float:
        return getattr(settings, self.backoff_setting)

    def backoff_max_seconds(self) -> float:
        return getattr(settings, self.backoff_max_setting)

    def lease_seconds(self) -> float:
        return getattr(settings, self.lease_setting)

    # --- attempts and delays ------------------------------------------------------------
    def max_attempts(self) -> int:
        return self.max_retries() + 1

    def has_retry_left(self, attempts: int) -> bool:
        """After `attempts` counted attempts, may another one be made?"""
        return attempts < self.max_attempts()

    def past_last_attempt(self, attempts: int) -> bool:
        """More attempts counted than allowed: every earlier run died without an outcome (a
        poison pill), so give it up rather than let it take workers down for ever."""
        return attempts > self.max_attempts()

    def retry_delay(self, retries: int, *, at_least: float = 0) -> int:
        """Seconds before retry number retries+1: Celery's backoff with full jitter."""
        delay = get_exponential_backoff_interval(factor=self.backoff_seconds(), retries=retries,
                                                 maximum=self.backoff_max_seconds(), full_jitter=True)
        return max(delay, int(at_least))

    def longest_retry_wait(self, retries: int) -> float:
        """The longest retry_delay(retries) can be (jitter only shortens it): how long a
        released row stays leased so that its retry, not a sweep, takes it."""
        return get_exponential_backoff_interval(factor=self.backoff_seconds(), retries=retries,
                                                maximum=self.backoff_max_seconds(), full_jitter=False)

    def lease(self, now: datetime | None = None, *, seconds: float | None = None) -> datetime:
        return (now or db_now()) + timedelta(seconds=self.lease_seconds() if seconds is None else seconds)

    # --- which rows -----------------------------------------------------------------------
    def free_to_take(self, now: datetime, *, owed_only: Q | None = None) -> Q:
        """Owed rows nobody holds (only those matching `owed_only`, if given), and held
        rows whose lease lapsed (their run was lost)."""
        lapsed = Q(**{f"{self.lease_until}__lte": now})
        owed = Q(**{self.state: self.owed}) & (owed_only or Q())
        if self.running == self.owed:
            return owed & Q(**{self.claim: None}) | Q(**{self.state: self.owed}) & lapsed
        return owed | (Q(**{self.state: self.running}) & lapsed)

    def still_owed(self) -> Q:
        """Rows whose work is not settled: waiting for a run, or held by one."""
        return Q(**{f"{self.state}__in": sorted({self.owed, self.running})})

    def lapsed(self, now: datetime) -> Q:
        """Rows owed or held whose lease lapsed: a task the broker lost, or a run lost with
        its worker. The sweeps queue these again."""
        return self.still_owed() & Q(**{f"{self.lease_until}__lte": now})

    def held_by(self, claim: uuid.UUID) -> Q:
        return Q(**{self.state: self.running, self.claim: claim})

    def _rows(self, rows) -> Q:
        ids = list(rows) if isinstance(rows, Iterable) and not isinstance(rows, (str, uuid.UUID)) else [rows]
        return Q(pk__in=ids)

    # --- take -----------------------------------------------------------------------------
    def _take_fields(self, claim: uuid.UUID, now: datetime) -> dict:
        return {self.state: self.running, self.claim: claim, self.lease_until: self.lease(now),
                self.attempts: F(self.attempts) + 1}

    def take_one(self, pk, *, returning: tuple[str, ...] = ()) -> tuple[uuid.UUID, dict] | None:
        """Take one row if it is free to take: (claim, {attempts and `returning`}), or None.
        One UPDATE … RETURNING: the hot path of every cleanup task."""
        claim = uuid.uuid4()
        fields = {f.name: f for f in self.model._meta.concrete_fields}
        column = lambda name: connection.ops.quote_name(fields[name].column)  # noqa: E731
        value = lambda name, v: fields[name].get_db_prep_value(v, connection)  # noqa: E731
        state, lease = column(self.state), column(self.lease_until)
        now_sql, now_params = clock_sql()
        lease_sql, lease_params = clock_sql(seconds_later=self.lease_seconds())
        if self.running == self.owed:
            where = f"{state} = %s AND ({column(self.claim)} IS NULL OR {lease} <= {now_sql})"
            where_params = [self.owed, *now_params]
        else:
            where = f"({state} = %s OR ({state} = %s AND {lease} <= {now_sql}))"
            where_params = [self.owed, self.running, *now_params]
        names = (self.attempts, *returning)
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {connection.ops.quote_name(self.model._meta.db_table)}"
                f" SET {state} = %s, {column(self.claim)} = %s, {lease} = {lease_sql},"
                f" {column(self.attempts)} = {column(self.attempts)} + 1"
                f" WHERE {column(self.model._meta.pk.name)} = %s AND {where}"
                f" RETURNING {', '.join(column(name) for name in names)}",
                [self.running, value(self.claim, claim), *lease_params,
                 value(self.model._meta.pk.name, pk), *where_params])
            row = cursor.fetchone()
        if row is None:
            return None
        return claim, {name: fields[name].to_python(raw) for name, raw in zip(names, row)}

    def take_batch(self, owed_rows, *, limit: int, **changes) -> tuple[uuid.UUID, list]:
        """Take up to `limit` of `owed_rows` (rows free to take, in order) for one run. Without
        SKIP LOCKED (SQLite) the conditional UPDATE guards against a second taker."""
        claim, now = uuid.uuid4(), db_now()
        with transaction.atomic(durable=True):
            ids = list(for_update_skip_locked(owed_rows).values_list("pk", flat=True)[:limit])
            if ids:
                taken = self.model.objects.filter(self.free_to_take(now), pk__in=ids).update(
                    **self._take_fields(claim, now), **changes)
                if taken != len(ids):  # only without SKIP LOCKED: another taker won some
                    ids = list(self.model.objects.filter(self.held_by(claim)).values_list("pk", flat=True))
        return claim, ids

    def extend_lease(self, rows, claim: uuid.UUID, *, seconds: float | None = None, error: str | None = None,
             **changes) -> int:
        """Keep the rows this claim holds for `seconds` more (the lease's length when not
        given): a retry of the same run, or a batch whose calls come one after another."""
        return self.settle(rows, claim, error=error, **{self.lease_until: self.lease(seconds=seconds)}, **changes)

    def retry_held(self, rows, claim: uuid.UUID) -> int:
        """A new run of work this claim still holds (a task's retry): count its attempt
        and renew the lease. Returns how many rows it still held."""
        return self.model.objects.filter(self._rows(rows), self.held_by(claim)).update(
            **{self.lease_until: self.lease(), self.attempts: F(self.attempts) + 1})

    # --- outcomes -------------------------------------------------------------------------
    def settle(self, rows, claim: uuid.UUID, *, state: str | None = None, error: str | None = None,
               **changes) -> int:
        """Write an outcome to the rows this claim still holds; returns how many. With a
        `state` the rows leave the run; without one they stay held."""
        fields = dict(changes)
        if state is not None:
            left = {self.state: state, self.lease_until: None}
            if self.running == self.owed or state == self.owed:
                left[self.claim] = None
            fields = {**left, **fields}
        if error is not None:
            fields[self.last_error] = error[:ERROR_MAX_CHARS]
        return self.model.objects.filter(self._rows(rows), self.held_by(claim)).update(**fields)

    def release(self, pk, claim: uuid.UUID, *, hold_seconds: float, error: str | None = None,
                give_back_attempt: bool = False, **changes) -> int:
        """Give a held row back for a retry within `hold_seconds`, leased until then so the
        retry, not a sweep, takes it (`give_back_attempt`: the run made no attempt)."""
        fields = {self.lease_until: self.lease(seconds=hold_seconds), **changes}
        if give_back_attempt:
            fields[self.attempts] = F(self.attempts) - 1
        return self.settle(pk, claim, state=self.owed, error=error, **fields)

    def dead_letter(self, rows, claim: uuid.UUID, *, error: str, **changes) -> int:
        return self.settle(rows, claim, state=self.dead, error=error, **changes)

    # --- lost runs and operators --------------------------------------------------------------
    def give_up_lapsed(self, *, error: str, **changes) -> int:
        """Rows whose last allowed attempt was lost with its run (the lease lapsed, none
        left): dead letters now, rather than retried for ever."""
        held = Q(**{self.state: self.running}) if self.running != self.owed else Q(**{self.state: self.owed})
        return self.model.objects.filter(
            held, **{f"{self.lease_until}__lte": db_now(), f"{self.attempts}__gte": self.max_attempts()},
        ).update(**{self.state: self.dead, self.claim: None, self.lease_until: None,
                    self.last_error: error[:ERROR_MAX_CHARS], **changes})

    def requeue_lapsed(self, rows, now: datetime, *, owed_lease=None, **changes) -> list:
        """The sweep's requeue of `rows` whose lease lapsed: a held one gets a fresh lease and
        `changes`, an owed one is leased until `owed_lease`. Returns the keys requeued."""
        lapsed = self.model.objects.filter(self._rows(rows), self.lapsed(now))
        if self.running == self.owed:
            ids = list(lapsed.values_list("pk", flat=True))
            lapsed.update(**{self.claim: None, self.lease_until: owed_lease or self.lease(now)})
            return ids
        claim = uuid.uuid4()
        lapsed.filter(**{self.state: self.running}).update(
            **{self.state: self.owed, self.claim: claim, self.lease_until: self.lease(now)}, **changes)
        lapsed.filter(**{self.state: self.owed}).update(
            **{self.claim: claim, self.lease_until: owed_lease or self.lease(now)})
        return list(self.model.objects.filter(self._rows(rows), **{self.claim: claim}).values_list("pk", flat=True))

    def requeue(self, rows, **changes) -> list:
        """The operator's requeue: the dead letters among `rows` owed again, with a fresh
        count of attempts. Returns the primary keys requeued."""
        with transaction.atomic():
            ids = list(self.model.objects.select_for_update().filter(self._rows(rows), **{self.state: self.dead})
                       .values_list("pk", flat=True))
            if ids:
                self.model.objects.filter(pk__in=ids).update(**{
                    self.state: self.owed, self.attempts: 0, self.claim: None, self.lease_until: None, **changes})
        return ids
