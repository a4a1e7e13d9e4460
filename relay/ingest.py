"""Taking a message into Relay's store, the one way for SMTP, the mail-server reader and
sent copies: parsed, codes and links found, verdict, stored, words owed."""
import logging
import threading
import time

from celery import current_app
from django.db import connection

from mailboxes.mail_format import header, lineage_of, parse_message, text_of_html
from mailboxes.models import Direction, MessageContent
from mailboxes.storing import Recipient, message_store
from relay import task_names
from relay.extraction import find_codes, find_links
from relay.authentication import authenticate, spf_of_mail_server

logger = logging.getLogger(__name__)


def message_ingest(*, raw: bytes, mail_from: str, recipients: list[Recipient], server_id: str = "",
                    authentication: dict | None = None, direction: str = Direction.IN,
                    joining: int | None = None) -> list[int]:
    """Parse `raw` and store it for each mailbox that still takes it (message_store's
    errors). `authentication`: SMTP's verdict; without it DKIM and DMARC are checked here."""
    parsed = parse_message(raw)
    if authentication is None:
        authentication = authenticate(raw, ip=None, mail_from=mail_from, helo="",
                                      spf_result=spf_of_mail_server(parsed.headers, mail_from))
    content = MessageContent(raw=raw, text=parsed.text, html=parsed.html, headers=parsed.headers,
                             authentication=authentication,
                             attachments=parsed.attachments, parsed_fully=parsed.parsed_fully,
                             codes=find_codes(parsed.subject, parsed.text or text_of_html(parsed.html)),
                             links=find_links(parsed.text, parsed.html))
    stored = message_store(content=content, envelope_from=mail_from, from_header=parsed.from_header,
                           to_header=parsed.to_header, cc_header=header(parsed.headers, "Cc"), subject=parsed.subject,
                           recipients=recipients, server_id=server_id, lineage=lineage_of(parsed.headers),
                           direction=direction, joining=joining)
    if stored:
        words_owed()
    return stored


# Sent by name: relay/tasks.py imports the flows (this one among them), not the reverse.
WORDS_TASK = task_names.INDEX_OWED_WORDS
# A worker is asked to write owed words at most this often per process, and that long
# after the first message that owes them: one task for every message a second brings.
WORDS_DELAY_SECONDS = 1.0
_words_lock = threading.Lock()
_words_next_publish = 0.0


def words_owed() -> None:
    """Ask a worker to write the words of the messages just stored, at most once per
    WORDS_DELAY_SECONDS; what a lost task leaves is beat's or the next search's."""
    global _words_next_publish
    if connection.vendor != "postgresql":
        return
    with _words_lock:
        now = time.monotonic()
        if now < _words_next_publish:
            return
        _words_next_publish = now + WORDS_DELAY_SECONDS
    # Published from a thread of its own: the message's 250 never waits on the broker.
    threading.Thread(target=_ask_for_words, name="smtp-words", daemon=True).start()


def _ask_for_words() -> None:
    try:
        current_app.signature(WORDS_TASK).apply_async(countdown=WORDS_DELAY_SECONDS)
    except Exception:
        logger.warning("could not queue the writing of owed search words; beat's backstop will", exc_info=True)
    finally:
        connection.close()  # this thread's own, if it opened one (a task run eagerly, in tests)
