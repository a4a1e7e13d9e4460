"""Input and output shapes of sending, replying, forwarding and threads (docs/api.md,
"Sending" and "Threads")."""
from django.conf import settings
from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from api.fields import ADDRESS_PATTERN, RuleField, StrictBooleanField, StrictCharField, StrictSerializer, by_rule
from api.serializers import MessageSummarySerializer
from mailboxes.mail_format import ONE_LINE_PATTERN
from relay.models import OutboxMail
from relay.outbox.outbound import (BODY_MAX, CONTENT_TYPE_PATTERN, FILENAME_MAX, MAX_ATTACHMENTS, MAX_RECIPIENTS,
                                   SUBJECT_MAX, sending_rule)


# --- what a send takes: the service's rules (relay.outbox.outbound.sending_checked) -----------
@extend_schema_field({"type": "string", "pattern": ADDRESS_PATTERN, "maxLength": 320})
class AddressField(RuleField):
    rule = staticmethod(sending_rule("reply_to"))


class RecipientListField(serializers.ListField):
    """A list of addresses, checked by the service's rule (relay.outbox.outbound.sending_checked);
    a single string is taken as a list of one."""

    def __init__(self, **kwargs):
        super().__init__(child=AddressField(), max_length=MAX_RECIPIENTS, **kwargs)

    def to_internal_value(self, data):
        if isinstance(data, str):
            data = [data]
        if isinstance(data, list):
            # The rule checks every item; the child field is there for the schema.
            return by_rule(sending_rule(self.field_name), data)
        return super().to_internal_value(data)


@extend_schema_field({"type": "string", "pattern": ONE_LINE_PATTERN})
class SubjectField(RuleField):
    rule = staticmethod(sending_rule("subject"))


class BodyField(RuleField):
    rule = staticmethod(sending_rule("text"))


# Bounded so that the largest valid bodies, every character JSON-escaped, stay well under
# the request size limit (DATA_UPLOAD_MAX_MEMORY_SIZE).
def _body(**kwargs) -> BodyField:
    return BodyField(max_length=BODY_MAX, allow_blank=True, **kwargs)


@extend_schema_field({"type": "string", "pattern": ONE_LINE_PATTERN})
class FilenameField(StrictCharField):
    pass


# An attachment's shape; what it may hold is the service's rule (AttachmentListField).
class AttachmentInSerializer(StrictSerializer):
    filename = FilenameField(min_length=1, max_length=FILENAME_MAX)
    content_type = StrictCharField(max_length=255, validators=[RegexValidator(CONTENT_TYPE_PATTERN)])
    content_base64 = StrictCharField(allow_blank=True, trim_whitespace=False,
                                     max_length=settings.RELAY_MAX_MESSAGE_BYTES * 4 // 3 + 4,
                                     help_text="The bytes, base64 (RFC 4648, no line breaks).")


ATTACHMENT_FIELDS = ("filename", "content_type", "content_base64")


def _shaped(data) -> bool:
    return isinstance(data, list) and all(
        isinstance(item, dict) and all(isinstance(item.get(name), str) for name in ATTACHMENT_FIELDS) for item in data)


class AttachmentListField(serializers.ListField):
    """Attachments checked by the service's rule, which makes them Attachment; their shape
    (objects of three strings, nothing else) is DRF's to check."""

    def to_internal_value(self, data):
        attachments = by_rule(sending_rule("attachments"), data) if _shaped(data) else None
        super().to_internal_value(data)
        return attachments


def _attachments():
    return AttachmentListField(child=AttachmentInSerializer(), max_length=MAX_ATTACHMENTS, required=False,
                               help_text=f"Up to {MAX_ATTACHMENTS}; the whole message within RELAY_MAX_MESSAGE_BYTES "
                                         "(413 over it).")


class SendSerializer(StrictSerializer):
    to = RecipientListField(min_length=1, help_text="A list of addresses (a single string counts as a list of one).")
    subject = SubjectField(min_length=1, max_length=SUBJECT_MAX, help_text="One line: no CR or LF.")
    text = _body()
    html = _body(required=False)
    cc = RecipientListField(required=False)
    bcc = RecipientListField(required=False, help_text="In the envelope only: never in the headers sent.")
    reply_to = AddressField(required=False)
    attachments = _attachments()


class ReplySerializer(StrictSerializer):
    text = _body()
    html = _body(required=False)
    reply_all = StrictBooleanField(required=False, default=False,
                                   help_text="Also to the original's To and Cc (never this mailbox).")
    attachments = _attachments()


class ForwardSerializer(StrictSerializer):
    to = RecipientListField(min_length=1)
    text = _body(required=False, default="", help_text="Written above the forwarded message.")


class ReleaseSerializer(StrictSerializer):
    to = RecipientListField(min_length=1, help_text="The only recipients: the envelope names these alone, never the "
                                                    "message's own To, Cc or Bcc.")


class SendAcceptedSerializer(serializers.Serializer):
    id = serializers.IntegerField(help_text="The outbox entry (GET …/outbox/{id}).")
    status = serializers.CharField()
    message_id = serializers.IntegerField(help_text="The copy kept in the mailbox (direction out).")


class OutboundSerializer(serializers.ModelSerializer):
    class Meta:
        model = OutboxMail
        fields = ["id", "to", "cc", "bcc", "subject", "status", "attempts", "last_error", "created_at", "sent_at"]


class ThreadSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    subject = serializers.CharField(help_text="The first message's, without Re:/Fwd:.")
    participants = serializers.SerializerMethodField(help_text="Every address in its From, To and Cc headers.")
    message_count = serializers.IntegerField()
    unread_count = serializers.IntegerField()
    last_message_at = serializers.DateTimeField()

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_participants(self, thread) -> list[str]:
        return self.context["participants"].get(thread.id, [])


class ThreadDetailSerializer(ThreadSerializer):
    messages = serializers.SerializerMethodField(help_text="Oldest first.")

    @extend_schema_field(MessageSummarySerializer(many=True))
    def get_messages(self, thread) -> list[dict]:
        return MessageSummarySerializer(self.context["messages"].get(thread.id, []), many=True).data
