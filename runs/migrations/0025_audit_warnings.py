"""Audits end `warnings` (some amber, none red) beside passed and flagged; an audit keeps the tools its
agent was shown (the leak scan searches them)."""
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0024_labels_in_layers'),
    ]

    operations = [
        migrations.AddField(
            model_name='audit',
            name='interface',
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AlterField(
            model_name='audit',
            name='status',
            field=models.CharField(choices=[('running', 'Running'), ('passed', 'Passed'), ('warnings', 'Warnings'), ('flagged', 'Flagged'), ('cancelled', 'Cancelled'), ('failed', 'Failed')], default='running', max_length=16),
        ),
    ]
