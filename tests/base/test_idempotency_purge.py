from datetime import timedelta

import pytest
from django.utils import timezone

from base.models import IdempotentRequest
from base.tasks import purge_idempotency_keys


@pytest.mark.django_db
def test_the_hourly_task_forgets_keys_older_than_a_day(alice):
    fields = {"user": alice, "method": "POST", "path": "/api/v1/jobs/", "body_hash": "x", "status_code": 201}
    old = IdempotentRequest.objects.create(key="old", **fields)
    IdempotentRequest.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(hours=25))
    IdempotentRequest.objects.create(key="new", **fields)
    assert purge_idempotency_keys() == 1
    assert list(IdempotentRequest.objects.values_list("key", flat=True)) == ["new"]
