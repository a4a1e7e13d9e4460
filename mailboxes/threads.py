"""Threads (docs/api.md, "Threads"): a mailbox's messages grouped into conversations by
their Message-ID, In-Reply-To and References headers, as mail clients group them.

Every Message-ID a mailbox has seen, as a message's own or as one a message answers, is
a ThreadKey pointing at a thread. A message stored joins the thread of any of its keys
and adds the keys it brings, so a reply joins its parent's thread whichever side sent
either, and a parent that arrives after its replies joins theirs. A message whose keys
lead to two threads (replies that arrived before the message linking them) merges them
into the older. Storing takes the mailbox's row lock first (the UPDATE of its counters,
mailboxes/storing.py), so two messages of one mailbox are threaded one after the other.
"""
import re
import uuid
from dataclasses import dataclass, field
from email.utils import getaddresses

from django.db.models import Count, Max, Q, QuerySet

from mailboxes.errors import NotFound
from mailboxes.models import Direction, Message, Thread, ThreadKey

# A Message-ID as written in the headers: <left@right>. Ids longer than a key holds are
# cut (two ids sharing their first 250 characters would share a thread).
ID = re.compile(r"<([^<>\s]+)>")
KEY_CHARS = 250
# A References header may list thousands of ids; the thread's root (the first) and the
# nearest parents (the last) are what link a message to its thread.
MAX_PARENTS = 50
# "Re:", "Fwd:" and their kin, as mail clients prefix a subject (repeated, any case, with
# a count like "Re[2]:").
REPLY_PREFIX = re.compile(r"^\s*(?:re|aw|sv|antw)(?:\[\d+\])?\s*:\s*", re.IGNORECASE)
FORWARD_PREFIX = re.compile(r"^\s*(?:fwd?|wg|tr)(?:\[\d+\])?\s*:\s*", re.IGNORECASE)


@dataclass(frozen=True)
class Lineage:
    """Where a message stands in its conversation: its own Message-ID and the ids of the
    messages it answers (References, then In-Reply-To)."""

    message_id: str = ""
    in_reply_to: str = ""
    references: tuple[str, ...] = field(default_factory=tuple)

    @property
    def parents(self) -> list[str]:
        ids = list(dict.fromkeys([*self.references, self.in_reply_to] if self.in_reply_to else self.references))
        ids = [key for key in ids if key != self.message_id]
        return ids if len(ids) <= MAX_PARENTS else [ids[0], *ids[-(MAX_PARENTS - 1):]]

    @property
    def keys(self) -> list[str]:
        return [self.message_id, *self.parents] if self.message_id else self.parents


def ids_in(value: str) -> list[str]:
    """The Message-IDs in a header's value, without their angle brackets."""
    found = ID.findall(value or "")
    if not found and value and len(value.split()) == 1:
        found = [value.strip()]  # an id written without its brackets
    return [key[:KEY_CHARS] for key in found]


def header(headers: list, name: str) -> str:
    """The first `name` header of a parsed message ([[name, value], …]), or ""."""
    name = name.lower()
    return next((value for key, value in headers if key.lower() == name), "")


def lineage_of(headers: list) -> Lineage:
    own = ids_in(header(headers, "Message-ID"))
    in_reply_to = ids_in(header(headers, "In-Reply-To"))
    return Lineage(message_id=own[0] if own else "", in_reply_to=in_reply_to[0] if in_reply_to else "",
                   references=tuple(ids_in(header(headers, "References"))))


def topic(subject: str) -> str:
    """A subject without its reply and forward prefixes: what a thread is called."""
    while True:
        shorter = FORWARD_PREFIX.sub("", REPLY_PREFIX.sub("", subject, count=1), count=1)
        if shorter == subject:
            return subject.strip()
        subject = shorter


def threads_assign(*, mailbox_ids, lineage: Lineage, subject: str, joining: int | None = None) -> dict:
    """The thread each of `mailbox_ids` files a new message in (mailbox id → thread id),
    made or merged as needed, with the message's keys recorded. `joining`: a thread the
    message belongs to whatever its headers say (a reply to a message without a
    Message-ID). Call inside the transaction that stores the message, after the
    mailboxes' rows are locked."""
    keys = lineage.keys
    found: dict = {mailbox_id: set() for mailbox_id in mailbox_ids}
    known: set = set()
    if keys:
        for mailbox_id, key, thread_id in (ThreadKey.objects.filter(mailbox_id__in=mailbox_ids, key__in=keys)
                                           .values_list("mailbox_id", "key", "thread_id")):
            found[mailbox_id].add(thread_id)
            known.add((mailbox_id, key))
    if joining is not None:
        for threads in found.values():
            threads.add(joining)
    new = [Thread(mailbox_id=mailbox_id, subject=topic(subject)) for mailbox_id, threads in found.items()
           if not threads]
    Thread.objects.bulk_create(new)
    chosen = {thread.mailbox_id: thread.id for thread in new}
    for mailbox_id, threads in found.items():
        if threads:
            chosen[mailbox_id] = min(threads)
            if len(threads) > 1:
                threads_merge(into=min(threads), others=threads - {min(threads)})
    ThreadKey.objects.bulk_create(
        [ThreadKey(mailbox_id=mailbox_id, key=key, thread_id=chosen[mailbox_id])
         for mailbox_id in mailbox_ids for key in keys if (mailbox_id, key) not in known],
        ignore_conflicts=True)
    return chosen


def threads_merge(*, into: int, others: set) -> None:
    """Move the messages and keys of threads `others` into thread `into`, and delete them."""
    Message.objects.filter(thread_id__in=others).update(thread_id=into)
    ThreadKey.objects.filter(thread_id__in=others).update(thread_id=into)
    Thread.objects.filter(id__in=others).delete()


# --- reading ------------------------------------------------------------------------------
def thread_list(*, mailbox_id: uuid.UUID) -> QuerySet:
    """A mailbox's threads with at least one message, newest activity first, each with
    its counts and last message's time."""
    return (Thread.objects.filter(mailbox_id=mailbox_id)
            .annotate(message_count=Count("messages"),
                      unread_count=Count("messages", filter=Q(messages__is_read=False,
                                                              messages__direction=Direction.IN)),
                      last_message_at=Max("messages__received_at"))
            .filter(message_count__gt=0).order_by("-last_message_at", "-id"))


def thread_get(*, mailbox_id: uuid.UUID, thread_id: int) -> Thread:
    try:
        return thread_list(mailbox_id=mailbox_id).get(id=thread_id)
    except Thread.DoesNotExist:
        raise NotFound("No such thread in this mailbox.") from None


def thread_participants(thread_ids: list[int]) -> dict[int, list[str]]:
    """The addresses in each thread's From, To and Cc headers, each once (lower case), in
    the order they first appear."""
    found: dict[int, dict[str, None]] = {thread_id: {} for thread_id in thread_ids}
    rows = (Message.objects.filter(thread_id__in=thread_ids).order_by("received_at", "id")
            .values_list("thread_id", "from_header", "to_header", "cc_header"))
    for thread_id, *values in rows:
        for _, address in getaddresses(values):
            if "@" in address:
                found[thread_id].setdefault(address.lower(), None)
    return {thread_id: list(addresses) for thread_id, addresses in found.items()}


def thread_messages(threads) -> dict[int, list[Message]]:
    """The messages of each thread, oldest first."""
    by_thread: dict[int, list[Message]] = {thread.id: [] for thread in threads}
    for message in Message.objects.filter(thread_id__in=list(by_thread)).order_by("received_at", "id"):
        by_thread[message.thread_id].append(message)
    return by_thread
