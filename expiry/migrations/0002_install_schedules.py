from django.db import migrations


def install(apps, schema_editor):
    from expiry.schedules import install_schedules

    install_schedules(apps)


class Migration(migrations.Migration):
    dependencies = [
        ("expiry", "0001_initial"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(install, migrations.RunPython.noop)]
