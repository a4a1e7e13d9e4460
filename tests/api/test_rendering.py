"""A mailbox, and a list of messages, rendered from fields bound once
(api.serializers.RenderedOnce) are what DRF's own rendering of the same serializer gives,
for every state and label a mailbox has and every kind of message a list shows, in any time
zone, and for a row given as a mapping."""
from datetime import datetime, timedelta, tzinfo
from datetime import timezone as dt_timezone
from types import SimpleNamespace

from django.conf import settings
from django.test import override_settings
from django.utils import timezone
from rest_framework import serializers

from api.serializers import MailboxSerializer, MessageSummarySerializer, RenderedOnce
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

    class Row(dict):  # a mapping with an attribute of a field's name: read by key, as DRF reads it
        subject = "an attribute, not the key"

    assert MessageSummarySerializer.represent(Row(row))["subject"] == "By key"
    assert MessageSummarySerializer.represent(Row(row)) == MessageSummarySerializer(Row(row)).data


class _NoOffset(tzinfo):
    """A zone that does not know its offset: DRF counts such a time as naive."""

    def utcoffset(self, when):
        return None


class _Doubled(serializers.IntegerField):
    def get_attribute(self, instance):  # a field that reads its own way
        return 2 * super().get_attribute(instance)


class _Shaped(RenderedOnce, serializers.Serializer):
    id = _Doubled()
    size = serializers.IntegerField()
    absent = serializers.CharField(required=False)  # DRF leaves it out when the row has none
    received_at = serializers.DateTimeField()


def test_fields_of_their_own_rows_without_a_field_and_other_time_formats_render_as_drf_renders_them(client_pro):
    row = SimpleNamespace(id=21, size=3, received_at=datetime(2026, 11, 29, 12, 0, tzinfo=_NoOffset()))
    with timezone.override("Asia/Kathmandu"):
        assert _Shaped.represent(row) == _Shaped(row).data
        assert _Shaped.represent(row)["id"] == 42 and "absent" not in _Shaped.represent(row)
        row.received_at = datetime(2026, 11, 29, 12, 0, tzinfo=dt_timezone.utc)
        assert _Shaped.represent(row)["received_at"] == "2026-11-29T17:45:00+05:45"
        with override_settings(REST_FRAMEWORK={**settings.REST_FRAMEWORK, "DATETIME_FORMAT": "%d.%m.%Y %H:%M"}):
            assert _Shaped.represent(row) == _Shaped(row).data
            assert _Shaped.represent(row)["received_at"] == "29.11.2026 17:45"
