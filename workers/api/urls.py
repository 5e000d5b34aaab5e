from django.urls import path, re_path
from rest_framework.routers import DefaultRouter

from workers.api import (
    agent_views,
    checkpoint_views,
    continue_views,
    dataset_views,
    deployment_views,
    job_views,
    model_views,
)

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("jobs", job_views.JobViewSet, basename="job")
router.register("datasets", dataset_views.DatasetViewSet, basename="dataset")
router.register("models", model_views.ModelViewSet, basename="model")
router.register("deployments", deployment_views.DeploymentViewSet, basename="deployment")

urlpatterns = [
    path("quotes/", job_views.QuoteView.as_view(), name="api-quotes"),
    # Before the router: a file name ends the URL (no trailing slash), and ".json"/".pt" are part of it.
    re_path(
        r"^jobs/(?P<pk>[0-9]+)/artifacts/(?P<path>.+)$",
        job_views.JobViewSet.as_view({"get": "artifact"}),
        name="job-artifact",
    ),
    # A step that is not a number reaches the view, which answers a 400 naming it (never the catch-all 404).
    re_path(
        r"^jobs/(?P<pk>[^/]+)/checkpoints/$", checkpoint_views.CheckpointListView.as_view(), name="job-checkpoints"
    ),
    re_path(
        r"^jobs/(?P<pk>[^/]+)/checkpoints/(?P<step>[^/]+)/$",
        checkpoint_views.CheckpointView.as_view(),
        name="job-checkpoint",
    ),
    re_path(
        r"^jobs/(?P<pk>[^/]+)/checkpoints/(?P<step>[^/]+)/download/$",
        checkpoint_views.CheckpointDownloadView.as_view(),
        name="job-checkpoint-download",
    ),
    re_path(r"^jobs/(?P<pk>[^/]+)/continue/$", continue_views.ContinueView.as_view(), name="job-continue"),
    path("agent/enroll/", agent_views.EnrollView.as_view(), name="agent-enroll"),
    path("agent/poll/", agent_views.PollView.as_view(), name="agent-poll"),
    path("agent/report/", agent_views.ReportView.as_view(), name="agent-report"),
    path("agent/storage/", agent_views.StorageView.as_view(), name="agent-storage"),
    *router.urls,
]
