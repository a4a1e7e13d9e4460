"""Sent mail becomes relay's outbox (docs/api.md: every outbound mail is one outbox row).
The rows stay: the table is renamed here and relay.0001 takes it over in state."""
from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("mailboxes", "0006_owner_is_an_account"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.AlterModelTable("outboundmessage", "relay_outboxmail")],
            state_operations=[migrations.DeleteModel("OutboundMessage")],
        ),
    ]
