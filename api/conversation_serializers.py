"""Input and output shapes of sending, replying, forwarding and threads (docs/api.md,
"Sending" and "Threads")."""
import base64
import binascii

from django.conf import settings
from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from api.fields import ADDRESS_PATTERN, OneLineField, StrictBooleanField, StrictCharField, StrictSerializer
from api.serializers import MessageSummarySerializer
from relay.models import OutboxMail
from relay.outbox.outbound import Attachment

# type/subtype (RFC 2045's tokens). multipart/* and message/* are refused: their
# structure is the message's to make, not an attachment's.
CONTENT_TYPE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}$"
MAX_ATTACHMENTS = 20
MAX_RECIPIENTS = 50


@extend_schema_field({"type": "string", "pattern": ADDRESS_PATTERN, "maxLength": 320})
class AddressField(StrictCharField):
    def __init__(self, **kwargs):
        super().__init__(max_length=320, **kwargs)
        self.validators.append(RegexValidator(ADDRESS_PATTERN, "Enter a valid email address."))


class RecipientListField(serializers.ListField):
    """A list of addresses; a single string is taken as a list of one."""

    def __init__(self, **kwargs):
        super().__init__(child=AddressField(), max_length=MAX_RECIPIENTS, **kwargs)

    def to_internal_value(self, data):
        if isinstance(data, str):
            data = [data]
        return super().to_internal_value(data)


class AttachmentInSerializer(StrictSerializer):
    filename = OneLineField(min_length=1, max_length=255)
    content_type = StrictCharField(max_length=255, validators=[RegexValidator(
        CONTENT_TYPE_PATTERN, "Enter a MIME type, type/subtype.")])
    content_base64 = StrictCharField(allow_blank=True, trim_whitespace=False,
                                     max_length=settings.RELAY_MAX_MESSAGE_BYTES * 4 // 3 + 4,
                                     help_text="The bytes, base64 (RFC 4648, no line breaks).")

    def validate_content_type(self, value: str) -> str:
        value = value.lower()
        if value.startswith(("multipart/", "message/")):
            raise serializers.ValidationError("multipart/* and message/* cannot be attached.")
        return value

    def validate_content_base64(self, value: str) -> bytes:
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise serializers.ValidationError("must be base64 (RFC 4648, no line breaks).") from None

    def validate(self, data) -> Attachment:
        return Attachment(filename=data["filename"], content_type=data["content_type"],
                          content=data["content_base64"])


def _attachments():
    return AttachmentInSerializer(many=True, required=False, max_length=MAX_ATTACHMENTS,
                                  help_text=f"Up to {MAX_ATTACHMENTS}; the whole message within "
                                            "RELAY_MAX_MESSAGE_BYTES (413 over it).")


# Bounded so that the largest valid bodies, every character JSON-escaped, stay well under
# the request size limit (DATA_UPLOAD_MAX_MEMORY_SIZE).
def _body(**kwargs):
    return StrictCharField(max_length=100_000, allow_blank=True, **kwargs)


class SendSerializer(StrictSerializer):
    to = RecipientListField(min_length=1, help_text="A list of addresses (a single string counts as a list of one).")
    subject = OneLineField(min_length=1, max_length=998, help_text="One line: no CR or LF.")
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
