import pytest
from django.core.cache import cache


@pytest.fixture(autouse=True)
def fresh_limits():
    """Each test starts with no tries counted against this machine's address."""
    cache.clear()
    yield
    cache.clear()
