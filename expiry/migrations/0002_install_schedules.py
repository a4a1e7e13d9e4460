from django.db import migrations


def install(apps, schema_editor):
    from core.schedules import install_schedules
    from relay.backends import keeps_accounts

    install_schedules(apps, read_mail_server=keeps_accounts())


class Migration(migrations.Migration):
    dependencies = [
        ("expiry", "0001_initial"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(install, migrations.RunPython.noop)]
