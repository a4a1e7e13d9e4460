"""accounts.identity.Cache, the one per-process cache of credentials (API keys and OAuth
access tokens): an entry is served only while the revocation counter in Redis stands where
it stood when the entry was made."""
from types import SimpleNamespace

import pytest

from accounts import identity


@pytest.fixture
def counted(settings):
    """A cache over the suite's Redis, with a counter of its own loads."""
    settings.RELAY_KEY_CACHE_SECONDS = 60
    loads = []

    def load(value):
        def loader():
            loads.append(value)
            return value
        return loader

    cache = identity.Cache(account_of=lambda value: value.account_id,
                              copy=lambda value: SimpleNamespace(**vars(value)))
    return cache, load, loads


def test_an_entry_is_served_until_a_revocation_is_announced(counted, db):
    cache, load, loads = counted
    key = SimpleNamespace(account_id=1, name="first")
    assert cache.get("k", load(key)) is key
    assert cache.get("k", load(key)).name == "first"
    assert len(loads) == 1, "the second look was not served from the cache"
    identity._revocation_announce_now()
    cache.get("k", load(key))
    assert len(loads) == 2, "an entry made before the revocation was served after it"


def test_each_caller_gets_its_own_copy(counted, db):
    cache, load, _ = counted
    cache.get("k", load(SimpleNamespace(account_id=1, name="first")))
    mine = cache.get("k", load(None))
    mine.name = "changed by a request"
    assert cache.get("k", load(None)).name == "first"


def test_nothing_is_cached_without_a_counter_to_trust(counted, settings):
    cache, load, loads = counted
    settings.RELAY_EVENTS_REDIS_URL = ""
    key = SimpleNamespace(account_id=1)
    cache.get("k", load(key))
    cache.get("k", load(key))
    assert len(loads) == 2 and not cache.entries


def test_an_account_forgotten_takes_only_its_own_entries(counted, db):
    cache, load, _ = counted
    cache.get("one", load(SimpleNamespace(account_id=1)))
    cache.get("two", load(SimpleNamespace(account_id=2)))
    cache.forget_account(1)
    assert set(cache.entries) == {"two"}


def test_a_value_gone_from_the_database_drops_its_entry(counted, settings, db):
    cache, load, _ = counted
    cache.get("k", load(SimpleNamespace(account_id=1)))
    settings.RELAY_KEY_CACHE_SECONDS = 0  # every look goes to the database
    assert cache.get("k", load(None)) is None
    assert "k" not in cache.entries
