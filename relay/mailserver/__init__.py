"""Mail read from the mail server (docs/architecture.md, "Mail read from the mail server"):
with Cyrus or Stalwart as the backend, the server is the MX and holds the mail, and this
flow copies each message delivered into a mailbox's inbox into Relay's store over JMAP,
where the API, waits, event streams and webhooks find it as if Relay's SMTP had stored it.

Three ways in, one reader (relay/mailserver/reader.py):
- `poll()`, beat's task every RELAY_MAILSERVER_POLL_SECONDS, one at a time across all
  workers: asks the server which accounts changed, then reads only those;
- `read_now(mailboxes)`, before an API read of those mailboxes: what was delivered a
  moment ago is there at once;
- `read_before_removal(mailbox_id)`, the cleanup's last look before the account is
  deleted, for mail delivered before the mailbox ended that no poll had read yet."""
from relay.mailserver.reader import poll, read_before_removal, read_now  # noqa: F401 (the flow's calls)
