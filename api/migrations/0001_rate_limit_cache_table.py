"""The database table behind the rate limits when there is no Redis (settings.CACHES):
made by `migrate`, so no one has to remember `createcachetable`."""
from django.core.management.commands.createcachetable import Command as CreateCacheTable
from django.db import migrations

TABLE = "relay_cache"


def create_table(apps, schema_editor):
    command = CreateCacheTable()
    command.verbosity = 0
    command.create_table(schema_editor.connection.alias, TABLE, dry_run=False)


def drop_table(apps, schema_editor):
    schema_editor.execute(f"DROP TABLE IF EXISTS {TABLE}")


class Migration(migrations.Migration):
    dependencies = []
    operations = [migrations.RunPython(create_table, drop_table)]
