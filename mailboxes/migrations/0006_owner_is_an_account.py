"""Mailboxes belong to accounts (accounts.0001 took over the owner table, so the foreign
key's column and constraint are already right: state only)."""
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("mailboxes", "0005_owner_tables_to_accounts"),
        ("accounts", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="mailbox", name="owner",
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE,
                                            related_name="mailboxes", to="accounts.account"),
                ),
                migrations.DeleteModel("ApiKey"),
                migrations.DeleteModel("Owner"),
            ],
        ),
    ]
