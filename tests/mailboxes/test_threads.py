"""Threads (mailboxes.threads): the rule itself, called directly, and as the API shows it
for mail that arrives in any order."""
from mailboxes.mail_format import Lineage
from mailboxes.models import Thread, ThreadKey
from mailboxes.threads import threads_assign
from tests.helpers import deliver, make_mailbox
from tests.relay.outbox.test_conversations import box_of, inbound, threads_of


def assign(mailbox, subject: str = "Plan", joining: int | None = None, **lineage) -> int:
    return threads_assign(mailbox_ids=[mailbox.id], lineage=Lineage(**lineage), subject=subject,
                          joining=joining)[mailbox.id]


def test_threads_assign_starts_a_thread_joins_it_by_key_and_merges_two_into_the_older(db):
    mailbox, other = make_mailbox("threads"), make_mailbox("threads-other")
    root = assign(mailbox, message_id="a@x.test", subject="Re: Fwd: Plan")
    assert Thread.objects.get(id=root).subject == "Plan", "a thread is named by its subject's topic"
    assert assign(mailbox, message_id="b@x.test", in_reply_to="a@x.test") == root
    stray = assign(mailbox, message_id="d@x.test", in_reply_to="c@x.test")
    assert stray != root, "a reply to an unseen message starts a thread of its own"
    assert assign(other, message_id="e@x.test", in_reply_to="a@x.test") != root, "keys are per mailbox"
    linking = assign(mailbox, message_id="c@x.test", in_reply_to="b@x.test", references=("a@x.test", "b@x.test"))
    assert linking == root and not Thread.objects.filter(id=stray).exists()
    assert set(ThreadKey.objects.filter(mailbox=mailbox).values_list("thread_id", flat=True)) == {root}
    assert assign(mailbox, joining=root) == root, "a message without ids joins the thread it is given"


def test_replies_that_arrive_before_their_parents_still_join_one_thread(client_pro):
    box = box_of(client_pro)
    to = box["address"]
    # d answers c, b answers a; c (answering b) links the two; a, the root, comes last.
    deliver(inbound(to, message_id="d@x.test", subject="Re: Plan", in_reply_to="<c@x.test>"), to)
    deliver(inbound(to, message_id="b@x.test", subject="Re: Plan", in_reply_to="<a@x.test>"), to)
    assert len(threads_of(client_pro, box)) == 2
    deliver(inbound(to, message_id="c@x.test", subject="Re: Plan", in_reply_to="<b@x.test>",
                    references="<a@x.test> <b@x.test>"), to)
    deliver(inbound(to, message_id="a@x.test", subject="Plan"), to)
    deliver(inbound(to, message_id="other@x.test", subject="Something else"), to)
    threads = threads_of(client_pro, box)
    assert [thread["message_count"] for thread in threads] == [1, 4]  # newest activity first
    whole = client_pro.get(f"/api/v1/mailboxes/{box['id']}/threads/{threads[1]['id']}").json()
    assert whole["subject"] == "Plan"
    listed = client_pro.get(f"/api/v1/mailboxes/{box['id']}/messages").json()["results"]
    ids = {item["subject"]: item["thread_id"] for item in listed}
    assert ids["Plan"] == threads[1]["id"] and ids["Something else"] == threads[0]["id"]


def test_a_thread_of_another_mailbox_is_404(client_pro, make_client):
    box, other = box_of(client_pro), box_of(make_client("mallory"))
    deliver(inbound(box["address"], message_id="t@x.test"), box["address"])
    [thread] = threads_of(client_pro, box)
    stranger = make_client("eve")
    assert stranger.get(f"/api/v1/mailboxes/{box['id']}/threads/{thread['id']}").status_code == 404
    assert client_pro.get(f"/api/v1/mailboxes/{box['id']}/threads/999999").status_code == 404
    assert other["id"] != box["id"]
