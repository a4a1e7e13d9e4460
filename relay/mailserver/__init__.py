"""Mail read from the mail server (Cyrus or Stalwart as the MX) into Relay's store over JMAP:
`poll()` for beat, `read_now(mailboxes)` before a read, `read_before_removal` before a cleanup."""
from relay.mailserver.reader import poll, read_before_removal, read_now  # noqa: F401 (the flow's calls)
