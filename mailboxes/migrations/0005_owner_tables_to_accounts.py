"""Owners and their keys become the accounts app's Account and ApiKey (docs/api.md). The
rows stay where they are: their tables are renamed here, and accounts.0001 takes them
over in Django's state without touching the database."""
from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("mailboxes", "0004_owner_live_mailboxes"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.AlterModelTable("owner", "accounts_account"),
                migrations.AlterModelTable("apikey", "accounts_apikey"),
            ],
        ),
    ]
