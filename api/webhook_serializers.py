"""Input and output shapes of the webhook routes (docs/api.md, "Webhooks")."""
import re

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from api.fields import (
    StrictCharField,
    StrictSerializer,
)
from webhooks.models import Webhook, WebhookDelivery, WebhookEvent


# --- webhooks (docs/api.md) -------------------------------------------------------------------
# A webhook URL, as a pattern a client (or a fuzzer) can read and the server checks as is:
# http(s), optional credentials, a host that is localhost, an IPv4 address or names
# ending in a top-level domain of 2 to 63 letters, an optional port, and no whitespace.
_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
WEBHOOK_URL_PATTERN = (r"^[Hh][Tt][Tt][Pp][Ss]?://([^\s:@/]+(:[^\s:@/]*)?@)?"
                       rf"(localhost|{_OCTET}(\.{_OCTET}){{3}}|([A-Za-z0-9]([A-Za-z0-9-]{{0,61}}[A-Za-z0-9])?\.)+[A-Za-z]{{2,63}}\.?)"
                       r"(:[0-9]{1,5})?([/?#][^\s]*)?$")


@extend_schema_field({"type": "string", "format": "uri", "maxLength": 2000, "pattern": WEBHOOK_URL_PATTERN})
class WebhookUrlField(StrictCharField):
    def __init__(self, **kwargs):
        super().__init__(max_length=2000, **kwargs)

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        # The schema's pattern is the rule, so a client and the server never disagree.
        if not re.fullmatch(WEBHOOK_URL_PATTERN, value):
            raise serializers.ValidationError(
                "Enter an http:// or https:// URL whose host is a name with a top-level domain, an IPv4 address "
                "or localhost.")
        return value


class WebhookCreateSerializer(StrictSerializer):
    url = WebhookUrlField()
    events = serializers.ListField(child=serializers.ChoiceField(choices=WebhookEvent.values), min_length=1,
                                   max_length=len(WebhookEvent.values))
    mailbox_id = serializers.UUIDField(required=False, allow_null=True,
                                       help_text="Only this mailbox's events; all of yours when absent.")


class WebhookSerializer(serializers.ModelSerializer):
    mailbox_id = serializers.UUIDField(allow_null=True)

    class Meta:
        model = Webhook
        fields = ["id", "url", "events", "mailbox_id", "created_at", "disabled_at", "disabled_reason"]


class WebhookCreatedSerializer(WebhookSerializer):
    secret = serializers.CharField(help_text="The signing secret (whsec_…), shown only now.")

    class Meta(WebhookSerializer.Meta):
        fields = [*WebhookSerializer.Meta.fields, "secret"]


class WebhookDeliverySerializer(serializers.ModelSerializer):
    class Meta:
        model = WebhookDelivery
        fields = ["id", "event", "status", "attempts", "last_status_code", "last_error", "created_at", "delivered_at"]
