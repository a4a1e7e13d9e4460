"""The pytest plugin (registered when relay-client is installed): `relay_mailbox`, a fresh
mailbox for each test from RELAY_URL and RELAY_API_KEY, deleted afterwards, pass or fail;
`relay_sandbox`, the same for a sandbox that catches what the app under test sends."""
from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from relay_client.client import DeliveryReport, Relay, RelayError, Sandbox
from relay_client.types import Mailbox, Message


class BoundMailbox:
    """A mailbox and its client: the waits and the message list without `mailbox_id`."""

    def __init__(self, relay: Relay, mailbox: Mailbox) -> None:
        self.relay, self.mailbox = relay, mailbox
        self.id, self.address, self.expires_at = mailbox.id, mailbox.address, mailbox.expires_at

    def wait_for_code(self, timeout_seconds: float = 30, from_: str | None = None, subject: str | None = None,
                      after: int | None = None) -> str:
        return self.relay.wait_for_code(self.id, timeout_seconds, from_=from_, subject=subject, after=after)

    def wait_for_message(self, timeout_seconds: float = 30, from_: str | None = None, subject: str | None = None,
                         after: int | None = None) -> Message | None:
        return self.relay.wait_for_message(self.id, timeout_seconds, from_=from_, subject=subject, after=after)

    def wait_for_delivery(self, message_id: int, timeout_seconds: float = 30) -> DeliveryReport:
        return self.relay.wait_for_delivery(self.id, message_id, timeout_seconds)

    def messages(self, query: str | None = None, unread: bool = False) -> list[Message]:
        return self.relay.list_messages(self.id, query=query, unread=unread)

    def __repr__(self) -> str:
        return f"<BoundMailbox {self.address}>"


@pytest.fixture
def relay_client() -> Relay:
    """A client from RELAY_URL and RELAY_API_KEY."""
    if not os.environ.get("RELAY_URL") or not os.environ.get("RELAY_API_KEY"):
        pytest.fail("relay_mailbox needs RELAY_URL and RELAY_API_KEY in the environment", pytrace=False)
    return Relay()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "relay_mailbox(ttl_minutes=None, local_part=None, name=None, tags=None): "
                                       "how the test's relay_mailbox is created")


@pytest.fixture
def relay_mailbox(request: pytest.FixtureRequest, relay_client: Relay) -> Iterator[BoundMailbox]:
    """A fresh mailbox, deleted when the test ends however it ends. A test sets its
    lifetime or address with `@pytest.mark.relay_mailbox(ttl_minutes=10, local_part=…)`."""
    marker = request.node.get_closest_marker("relay_mailbox")
    mailbox = relay_client.create_mailbox(**(marker.kwargs if marker else {}))
    try:
        yield BoundMailbox(relay_client, mailbox)
    finally:
        try:
            relay_client.delete_mailbox(mailbox.id)
        except RelayError as exc:
            if exc.code != "not_found":  # the test deleted it itself
                raise


@pytest.fixture
def relay_sandbox(relay_client: Relay) -> Iterator[Sandbox]:
    """A fresh sandbox (`.smtp`, `.django_settings()`), deleted when the test ends however
    it ends; read what it caught with `relay_client.wait_for_message(relay_sandbox.id)`."""
    sandbox = relay_client.create_sandbox()
    try:
        yield sandbox
    finally:
        try:
            relay_client.delete_mailbox(sandbox.id)
        except RelayError as exc:
            if exc.code != "not_found":
                raise
