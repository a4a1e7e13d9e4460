"""The shapes of the message checks' answers (docs/checks.md), for the schema and its
generated clients: the checks build plain dicts (checks/), these describe them."""
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

SUPPORT = ["yes", "partial", "no"]


class ClientSerializer(serializers.Serializer):
    id = serializers.CharField(help_text="family.platform, e.g. gmail.desktop-webmail")
    family = serializers.CharField()
    name = serializers.CharField()


@extend_schema_field({"type": "object", "additionalProperties": {"type": "string", "enum": SUPPORT}})
class SupportField(serializers.DictField):
    pass


@extend_schema_field({"type": "object", "additionalProperties": {"type": "number", "nullable": True},
                      "description": "overall, and one entry per client family: of the message's feature uses "
                                     "caniemail's data has tested in those clients, the share (0 to 1) supported, "
                                     "partial support counting half"})
class ScoreField(serializers.DictField):
    pass


@extend_schema_field({"type": "object", "additionalProperties": {"type": "number", "nullable": True},
                      "description": "overall, and one entry per client family: the share (0 to 1) of the "
                                     "message's feature uses that caniemail's data has tested in those clients, "
                                     "which the score rests on"})
class TestedField(serializers.DictField):
    pass


class HtmlFeatureSerializer(serializers.Serializer):
    slug = serializers.CharField()
    title = serializers.CharField()
    url = serializers.URLField()
    support = SupportField(help_text="Per client id: yes, partial or no (clients without data are left out).")
    notes = serializers.ListField(child=serializers.CharField())
    count = serializers.IntegerField(help_text="How many times the message uses it.")


class HtmlCheckSerializer(serializers.Serializer):
    data_date = serializers.DateField(help_text="The date of the caniemail data Relay ships.")
    clients = ClientSerializer(many=True)
    score = ScoreField(allow_null=True, help_text="null for a message without HTML")
    tested = TestedField(allow_null=True, help_text="null for a message without HTML")
    features = HtmlFeatureSerializer(many=True, help_text="The features used that some client does not fully "
                                                          "support, least supported first.")


class LinkResultSerializer(serializers.Serializer):
    url = serializers.CharField()
    status_code = serializers.IntegerField(allow_null=True)
    final_url = serializers.CharField()
    redirects = serializers.IntegerField()
    error = serializers.CharField(allow_null=True)
    ok = serializers.BooleanField(help_text="Answered 2xx after at most 5 redirects.")


class LinkCheckSerializer(serializers.Serializer):
    status = serializers.ChoiceField(["pending", "done"])
    links = LinkResultSerializer(many=True)


class SpamRuleSerializer(serializers.Serializer):
    name = serializers.CharField()
    score = serializers.FloatField()
    description = serializers.CharField()


class SpamCheckSerializer(serializers.Serializer):
    score = serializers.FloatField()
    threshold = serializers.FloatField()
    is_spam = serializers.BooleanField()
    rules = SpamRuleSerializer(many=True)


class HeaderCheckItemSerializer(serializers.Serializer):
    name = serializers.ChoiceField(["list_unsubscribe", "one_click_unsubscribe", "message_id", "date",
                                    "dkim_aligned"])
    ok = serializers.BooleanField()
    detail = serializers.CharField()


class HeaderCheckSerializer(serializers.Serializer):
    checks = HeaderCheckItemSerializer(many=True)
