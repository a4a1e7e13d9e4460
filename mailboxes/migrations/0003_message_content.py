"""Message bodies move to MessageContent, stored once per SMTP DATA and shared by its
recipients; mailboxes count their stored bytes for the storage quota."""
import django.db.models.deletion
from django.db import migrations, models
from django.db.models import Sum


def split_contents(apps, schema_editor):
    Message = apps.get_model("mailboxes", "Message")
    MessageContent = apps.get_model("mailboxes", "MessageContent")
    Mailbox = apps.get_model("mailboxes", "Mailbox")
    for message in Message.objects.all().iterator(chunk_size=500):
        content = MessageContent.objects.create(raw=message.raw, text=message.text, html=message.html,
                                                headers=message.headers, attachments=message.attachments)
        Message.objects.filter(id=message.id).update(content=content, has_attachments=bool(message.attachments))
    for mailbox_id, total in Message.objects.values_list("mailbox_id").annotate(total=Sum("size")).order_by():
        Mailbox.objects.filter(id=mailbox_id).update(stored_bytes=total)


class Migration(migrations.Migration):

    dependencies = [
        ("mailboxes", "0002_provisioning_state"),
    ]

    operations = [
        migrations.CreateModel(
            name="MessageContent",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("raw", models.BinaryField()),
                ("text", models.TextField(blank=True, default="")),
                ("html", models.TextField(blank=True, default="")),
                ("headers", models.JSONField(default=list)),
                ("attachments", models.JSONField(default=list)),
                ("parsed_fully", models.BooleanField(default=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
        ),
        migrations.AddField(
            model_name="message",
            name="content",
            field=models.ForeignKey(null=True, on_delete=django.db.models.deletion.CASCADE, related_name="messages",
                                    to="mailboxes.messagecontent"),
        ),
        migrations.AddField(model_name="message", name="has_attachments", field=models.BooleanField(default=False)),
        migrations.AddField(model_name="mailbox", name="stored_bytes", field=models.PositiveBigIntegerField(default=0)),
        migrations.RunPython(split_contents, migrations.RunPython.noop),
        migrations.RemoveField(model_name="message", name="raw"),
        migrations.RemoveField(model_name="message", name="text"),
        migrations.RemoveField(model_name="message", name="html"),
        migrations.RemoveField(model_name="message", name="headers"),
        migrations.RemoveField(model_name="message", name="attachments"),
        migrations.AlterField(
            model_name="message",
            name="content",
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="messages",
                                    to="mailboxes.messagecontent"),
        ),
    ]
