"""The outbox (docs/api.md): mailboxes' sent-mail table, taken over and widened to every mail
Relay sends, with the claim and lease the mailer needs. On PostgreSQL every row that
becomes queued NOTIFYs `relay_outbox`, which wakes the mailers (relay/outbox/send.py)."""
import django.db.models.deletion
from django.db import migrations, models

# A trigger, not a NOTIFY in the service: a row queued by any path (a send, a sign-up, a
# requeue from the admin, a hand-written UPDATE) wakes the mailers, and the notification
# goes out only when the transaction that queued it commits.
NOTIFY_SQL = """
CREATE OR REPLACE FUNCTION relay_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('relay_outbox', NEW.id::text);
    RETURN NULL;
END;
$$;
CREATE TRIGGER relay_outbox_queued
    AFTER INSERT OR UPDATE OF status ON relay_outboxmail
    FOR EACH ROW WHEN (NEW.status = 'queued')
    EXECUTE FUNCTION relay_outbox_notify();
"""
DROP_NOTIFY_SQL = """
DROP TRIGGER IF EXISTS relay_outbox_queued ON relay_outboxmail;
DROP FUNCTION IF EXISTS relay_outbox_notify();
"""


def create_notify_trigger(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(NOTIFY_SQL)


def drop_notify_trigger(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP_NOTIFY_SQL)


def earlier_sends_join_the_outbox(apps, schema_editor):
    """Rows sent the old way: their From is their mailbox's address, and one left
    `sending` by a worker that died is owed again (its lease lapsed long ago)."""
    from django.db.models import OuterRef, Subquery
    from django.utils import timezone

    OutboxMail = apps.get_model("relay", "OutboxMail")
    Mailbox = apps.get_model("mailboxes", "Mailbox")
    OutboxMail.objects.filter(mailbox__isnull=False).update(
        from_email=Subquery(Mailbox.objects.filter(id=OuterRef("mailbox_id")).values("address")[:1]))
    OutboxMail.objects.filter(status="sending").update(lease_until=timezone.now())


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ("mailboxes", "0007_outbound_to_relay_outbox"),
        ("accounts", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="OutboxMail",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("to", models.JSONField()),
                        ("subject", models.CharField(max_length=998)),
                        ("text", models.TextField()),
                        ("html", models.TextField(blank=True, default="")),
                        ("status", models.CharField(choices=[("queued", "Queued"), ("sending", "Sending"), ("sent", "Sent"), ("failed", "Failed")], default="queued", max_length=8)),
                        ("attempts", models.PositiveIntegerField(default=0)),
                        ("last_error", models.TextField(blank=True, default="")),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("sent_at", models.DateTimeField(blank=True, null=True)),
                        ("mailbox", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="outbound", to="mailboxes.mailbox")),
                    ],
                    options={
                        "db_table": "relay_outboxmail",
                        "indexes": [models.Index(fields=["mailbox", "-created_at"], name="outbound_mailbox_list")],
                    },
                ),
            ],
        ),
        migrations.AlterModelOptions("outboxmail", {"verbose_name": "outbox mail", "verbose_name_plural": "outbox"}),
        migrations.AlterField("outboxmail", "mailbox", models.ForeignKey(
            blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name="outbound",
            to="mailboxes.mailbox")),
        migrations.AlterField("outboxmail", "status", models.CharField(
            choices=[("queued", "Queued"), ("sending", "Sending"), ("sent", "Sent"), ("failed", "Failed"),
                     ("skipped", "Skipped")], default="queued", max_length=8)),
        migrations.AddField("outboxmail", "kind", models.CharField(
            choices=[("recovery", "Recovery"), ("activation", "Activation"), ("send", "Send")], default="send",
            max_length=10)),
        migrations.AddField("outboxmail", "priority", models.PositiveSmallIntegerField(default=2)),
        migrations.AddField("outboxmail", "token", models.ForeignKey(
            blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name="mails",
            to="accounts.token")),
        migrations.AddField("outboxmail", "from_email", models.CharField(blank=True, default="", max_length=320)),
        migrations.AddField("outboxmail", "claim", models.UUIDField(blank=True, null=True)),
        migrations.AddField("outboxmail", "claimed_at", models.DateTimeField(blank=True, null=True)),
        migrations.AddField("outboxmail", "lease_until", models.DateTimeField(blank=True, null=True)),
        migrations.AddIndex("outboxmail", models.Index(condition=models.Q(("status", "queued")),
                                                       fields=["priority", "id"], name="outbox_queued")),
        migrations.AddIndex("outboxmail", models.Index(condition=models.Q(("status", "sending")),
                                                       fields=["lease_until"], name="outbox_sending_lease")),
        migrations.AddIndex("outboxmail", models.Index(fields=["status", "-created_at"], name="outbox_status")),
        migrations.RunPython(earlier_sends_join_the_outbox, migrations.RunPython.noop),
        migrations.RunPython(create_notify_trigger, drop_notify_trigger),
    ]
