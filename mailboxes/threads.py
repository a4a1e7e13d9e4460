"""Threads (docs/api.md, "Threads"): each Message-ID a mailbox has seen is a ThreadKey; a
message joins the oldest thread of its keys, and keys leading to two threads merge them."""
import uuid
from email.utils import getaddresses

from django.db.models import Count, Max, Q, QuerySet

from mailboxes.errors import NotFound
from mailboxes.mail_format import Lineage, topic
from mailboxes.models import Direction, Message, Thread, ThreadKey

def threads_assign(*, mailbox_ids, lineage: Lineage, subject: str, joining: int | None = None) -> dict:
    """The thread each of `mailbox_ids` files a new message in, made or merged as needed,
    its keys recorded (`joining`: a thread it belongs to whatever its headers say)."""
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
