"""A job's plan: stored as JSON, read and written as the planner's typed `Plan`."""

from __future__ import annotations

from django.db import models
from django.db.models.query_utils import DeferredAttribute

from kernel.planner.types import Plan


class PlanAttribute(DeferredAttribute):
    """Whatever is assigned (a Plan, its JSON from the database or a fixture's dict) reads back as a Plan."""

    def __set__(self, instance, value) -> None:
        instance.__dict__[self.field.attname] = Plan.from_dict(value) if isinstance(value, dict) else value


class PlanField(models.JSONField):
    """JSON in the database (`Plan.to_dict()`), a `Plan` on the model."""

    descriptor_class = PlanAttribute

    def get_prep_value(self, value):
        return super().get_prep_value(value.to_dict() if isinstance(value, Plan) else value)

    def to_python(self, value):
        return value.to_dict() if isinstance(value, Plan) else super().to_python(value)

    def value_from_object(self, obj):
        value = super().value_from_object(obj)
        return value.to_dict() if isinstance(value, Plan) else value
