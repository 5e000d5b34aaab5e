from django.urls import path
from rest_framework.routers import DefaultRouter

from workers.api import agent_views, job_views

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("jobs", job_views.JobViewSet, basename="job")
router.register("datasets", job_views.DatasetViewSet, basename="dataset")

urlpatterns = [
    path("quotes/", job_views.QuoteView.as_view(), name="api-quotes"),
    path("agent/enroll/", agent_views.EnrollView.as_view(), name="agent-enroll"),
    path("agent/poll/", agent_views.PollView.as_view(), name="agent-poll"),
    path("agent/report/", agent_views.ReportView.as_view(), name="agent-report"),
    *router.urls,
]
