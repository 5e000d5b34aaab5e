"""OpenAI's routes, included at /v1/ by the root URL conf (portal/urls.py): the serving gateway's (inference on
the user's deployments) and fine-tuning's; no trailing slashes, as OpenAI's client calls them. Any other /v1/
path is OpenAI's 404."""

from django.urls import path, re_path

from openai_api import files, gateway, job_views
from openai_api.errors import unknown_route

urlpatterns = [
    path("chat/completions", gateway.ChatCompletionsView.as_view(), name="openai-chat-completions"),
    path("completions", gateway.CompletionsView.as_view(), name="openai-completions"),
    path("models", gateway.ModelsView.as_view(), name="openai-models"),
    path("models/<path:model>", gateway.ModelView.as_view(), name="openai-model"),
    path("files", files.FilesView.as_view(), name="openai-files"),
    path("files/<str:file_id>", files.FileView.as_view(), name="openai-file"),
    path("files/<str:file_id>/content", files.FileContentView.as_view(), name="openai-file-content"),
    path("fine_tuning/jobs", job_views.JobsView.as_view(), name="openai-jobs"),
    path("fine_tuning/jobs/<str:job_id>", job_views.JobView.as_view(), name="openai-job"),
    path("fine_tuning/jobs/<str:job_id>/cancel", job_views.JobCancelView.as_view(), name="openai-job-cancel"),
    path("fine_tuning/jobs/<str:job_id>/events", job_views.JobEventsView.as_view(), name="openai-job-events"),
    path(
        "fine_tuning/jobs/<str:job_id>/checkpoints",
        job_views.JobCheckpointsView.as_view(),
        name="openai-job-checkpoints",
    ),
    re_path(r"^.*$", unknown_route),
]
