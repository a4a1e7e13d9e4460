"""A mailbox, and a list of messages, rendered from fields bound once
(api.serializers.RenderedOnce) are what DRF's own rendering of the same serializer gives,
for every state and label a mailbox has and every kind of message a list shows, in any time
zone, and for a row given as a mapping."""
from datetime import timedelta

from django.utils import timezone

from api.serializers import MailboxSerializer, MessageSummarySerializer
from mailboxes.models import Mailbox, Message
from tests.helpers import create_mailbox, deliver, earlier, expire_now
from tests.mail_corpus import mail


def test_a_mailbox_renders_as_drf_renders_it_whatever_its_state(client_pro):
    labelled = create_mailbox(client_pro, name="Signup flow", tags=["ci", "login"], metadata={"run": 7, "ok": True})
    bare = create_mailbox(client_pro)
    earlier(Mailbox.objects.filter(id=bare["id"]), timedelta(minutes=11), "created_at", "expires_at")
    expire_now(Mailbox.objects.get(id=bare["id"]))
    for mailbox in Mailbox.objects.filter(id__in=[labelled["id"], bare["id"]]):
        assert MailboxSerializer.represent(mailbox) == MailboxSerializer(mailbox).data
        assert client_pro.get(f"/api/v1/mailboxes/{mailbox.id}").json() == MailboxSerializer(mailbox).data
    statuses = {mailbox.status for mailbox in Mailbox.objects.filter(id__in=[labelled["id"], bare["id"]])}
    assert statuses == {"active", "expired"}


def test_messages_render_as_drf_renders_them_in_the_api_list(client_pro):
    box = create_mailbox(client_pro)
    deliver(mail(box["address"], "Plain"), box["address"])
    deliver(mail(box["address"], "Ümlaut and a file", "See attached.", attachments=[(b"x", "text/plain", "a.txt")]),
            box["address"], mail_from="")
    Message.objects.filter(subject="Plain").update(thread=None, is_read=True)  # mail kept from before threads
    messages = list(Message.objects.filter(mailbox_id=box["id"]).order_by("-received_at", "-id"))
    assert {(m.thread_id is None, m.has_attachments) for m in messages} == {(True, False), (False, True)}
    assert MessageSummarySerializer.represent_many(messages) == MessageSummarySerializer(messages, many=True).data
    listed = client_pro.get(f"/api/v1/mailboxes/{box['id']}/messages").json()["results"]
    assert listed == MessageSummarySerializer(messages, many=True).data


def test_times_render_as_drf_renders_them_in_another_time_zone_and_a_mapping_by_its_keys(client_pro):
    box = create_mailbox(client_pro, tags=["ci"])
    deliver(mail(box["address"], "Zoned"), box["address"])
    Message.objects.filter(mailbox_id=box["id"]).update(rcpt_to=["a@example.com", "b@example.com"])
    messages = list(Message.objects.filter(mailbox_id=box["id"]))
    mailbox = Mailbox.objects.get(id=box["id"])
    with timezone.override("Asia/Kathmandu"):  # +05:45: neither UTC's "Z" nor a whole hour
        rendered = MessageSummarySerializer.represent_many(messages)
        assert rendered == MessageSummarySerializer(messages, many=True).data
        assert rendered[0]["received_at"].endswith("+05:45")
        assert MailboxSerializer.represent(mailbox) == MailboxSerializer(mailbox).data
    row = {"id": 7, "mailbox_id": box["id"], "sender": "a@example.com", "to_header": "", "envelope_from": "",
           "envelope_to": "", "rcpt_to": [], "subject": "By key", "received_at": messages[0].received_at, "size": 1,
           "is_read": 0, "has_attachments": False, "authenticated": True, "direction": "in", "thread_id": None}
    assert MessageSummarySerializer.represent(row) == MessageSummarySerializer(row).data
    assert MessageSummarySerializer.represent(row)["is_read"] is False
