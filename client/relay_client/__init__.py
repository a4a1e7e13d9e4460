"""A client for Relay's disposable mailboxes: `Relay(base_url, api_key)`, typed results,
errors that carry the API's code, waits that return as soon as mail arrives."""
from relay_client.client import DeliveryReport, Relay, RelayError, Sandbox, WaitTimeout, verify_webhook
from relay_client.types import Attachment, Delivery, Domain, DomainRecord, Event, Link, Mailbox, Message, Sent, Thread

__all__ = ["Relay", "RelayError", "DeliveryReport", "Sandbox", "WaitTimeout", "verify_webhook", "Attachment",
           "Delivery", "Domain", "DomainRecord", "Event", "Link", "Mailbox", "Message", "Sent", "Thread"]
