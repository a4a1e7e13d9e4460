"""Input and output shapes of the domain routes (docs/api.md, "Domains")."""
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from api.fields import RuleField, StrictSerializer
from api.schema import DOMAIN_NAME_PATTERN
from domains.models import DomainStatus
from domains.records import to_publish
from domains.services import name_check


@extend_schema_field({"type": "string", "minLength": 1, "maxLength": 254, "pattern": DOMAIN_NAME_PATTERN})
class DomainNameField(RuleField):
    rule = staticmethod(name_check)


class DomainCreateSerializer(StrictSerializer):
    name = DomainNameField(help_text="The domain, e.g. mail.example.com: not one of Relay's own.")


class DomainRecordSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=["MX", "TXT"])
    name = serializers.CharField(help_text="Where to publish it.")
    value = serializers.CharField(help_text="What to publish (an MX's host, at any priority).")
    status = serializers.ChoiceField(choices=["ok", "missing", "wrong", "unchecked"],
                                     help_text="What the last verification found; unchecked before one, or when "
                                               "no answer came in time.")


class DomainSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    status = serializers.ChoiceField(choices=DomainStatus.choices)
    created_at = serializers.DateTimeField()
    verified_at = serializers.DateTimeField(allow_null=True)
    records = serializers.SerializerMethodField(help_text="The records to publish: MX and DKIM make it verified; "
                                                          "SPF and DMARC are recommended.")

    @extend_schema_field(DomainRecordSerializer(many=True))
    def get_records(self, domain) -> list[dict]:
        return to_publish(domain)
