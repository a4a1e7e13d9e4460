"""The limit on backend calls shared by all workers (relay/backends/limiter.py, docs/architecture.md): on its
own, in both its forms (real Redis, and the database when there is no Redis), then with
real workers against the Stalwart stand-in enforcing Stalwart's limits."""
import functools
import threading
import time

import pytest
import redis
from django.conf import settings
from django.db import connection

from mailboxes.models import CleanupState, Mailbox
from relay.backends import NoBackendSlot
from relay.backends.limiter import KEY_HOLDERS, KEY_STARTS, DatabaseLimiter, Limiter, RedisLimiter
from tests.helpers import make_mailbox, wait_until


@pytest.fixture(params=["redis", "database"])
def limiter(request):
    """Make limiters of one form, starting from no call made (4 at once, 1000 a minute)."""
    if request.param == "redis":
        client = redis.Redis.from_url(settings.RELAY_EVENTS_REDIS_URL)
        client.delete(KEY_HOLDERS, KEY_STARTS)
        request.addfinalizer(lambda: client.delete(KEY_HOLDERS, KEY_STARTS))
        make = functools.partial(RedisLimiter, settings.RELAY_EVENTS_REDIS_URL)
    else:
        make = DatabaseLimiter

    def limiter(**limits) -> Limiter:
        return make(**{"max_concurrent": 4, "max_per_minute": 1000, "hold_seconds": 30, **limits})
    return limiter


# Threads each open their own connection: the database form needs committed rows.
@pytest.mark.django_db(transaction=True)
def test_threads_never_exceed_the_concurrency(limiter):
    shared = limiter()
    lock, state = threading.Lock(), {"now": 0, "most": 0, "done": 0}

    def call() -> None:
        try:
            with shared.slot(max_wait=30):
                with lock:
                    state["now"] += 1
                    state["most"] = max(state["most"], state["now"])
                # Held until four were in at once (on a loaded machine threads start late), then briefly.
                wait_until(lambda: state["most"] >= 4, timeout=20, interval=0.01, message="four calls at once")
                time.sleep(0.01)
                with lock:
                    state["now"] -= 1
                    state["done"] += 1
        finally:
            connection.close()  # the thread's own, in the database form

    threads = [threading.Thread(target=call) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert state["done"] == 16 and state["most"] == 4


@pytest.mark.django_db(transaction=True)
def test_the_per_minute_count_holds_over_its_window(limiter):
    shared = limiter(max_per_minute=5)
    for _ in range(5):
        with shared.slot(max_wait=1):
            pass
    with pytest.raises(NoBackendSlot) as refused:
        with shared.slot(max_wait=0.2):
            pass
    assert 50 <= refused.value.retry_after <= 61  # the oldest call leaves the window in about a minute


@pytest.mark.django_db(transaction=True)
def test_a_slot_held_by_a_killed_worker_comes_back_after_its_hold(limiter):
    shared = limiter(max_concurrent=1, hold_seconds=1)
    # A worker that took the slot and died: taken, never released.
    assert shared.try_take("dead-worker") == (True, 0)
    started = time.monotonic()
    with shared.slot(max_wait=5):
        waited = time.monotonic() - started
    assert 0.5 <= waited < 5  # after the 1 s hold, not before it; the upper bound is max_wait


@pytest.mark.workers
def test_a_burst_against_stalwarts_limits_ends_with_no_dead_letter_and_no_refusal(processes, stalwart):
    # Stalwart's own limits: 1,000 calls a minute, 4 at once. Each of the 300 cleanups is two
    # calls (the mail reader's last look, then the destroy), so the concurrent limit is the
    # one that binds; the per-minute one is tested on its own above.
    stalwart.per_minute = 1000
    stalwart.latency = 0.02
    processes.env.update({"RELAY_BACKEND_MAX_PER_MINUTE": "1000", "RELAY_BACKEND_MAX_CONCURRENT": "4"})
    redis.Redis.from_url(settings.RELAY_EVENTS_REDIS_URL).delete(KEY_HOLDERS, KEY_STARTS)
    for i in range(300):
        make_mailbox(f"burst{i}", due=True, stalwart=stalwart)
    for name in ("w1", "w2", "w3"):
        processes.worker(name, concurrency=4)
    processes.beat("beat")
    processes.wait_ready()
    wait_until(lambda: Mailbox.objects.filter(cleanup_state=CleanupState.DONE).count() == 300, timeout=120,
               message="300 cleanups done")
    assert not Mailbox.objects.filter(cleanup_state=CleanupState.DEAD).exists()
    assert stalwart.refused_over_limit == 0 and stalwart.max_in_flight <= 4
