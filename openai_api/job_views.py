"""/v1/fine_tuning/jobs: create, list, retrieve, cancel, events and checkpoints of a user's jobs.

Another user's job is a 404, as one that doesn't exist. Lists are newest first and paginated by `after` (the
last id of the previous page) and `limit` (1 to 100, default 20), as OpenAI's are.
"""

from __future__ import annotations

from rest_framework.response import Response

from fleet.models import Job
from openai_api.errors import OpenAIView, not_found
from openai_api.job_create import create_job
from openai_api.job_objects import checkpoint_object, event_object, job_object, own_checkpoints
from openai_api.objects import CHECKPOINT, EVENT, JOB, cursor_page, page_params, pk_or_404
from workers.models import JobEvent
from workers.services.lifecycle import cancel


def own_job(request, job_id: str) -> Job:
    job = Job.objects.filter(pk=pk_or_404(JOB, job_id), owner=request.user).first()
    if job is None:
        raise not_found(f"No such fine-tuning job: {job_id}")
    return job


class JobsView(OpenAIView):
    def get(self, request):
        after, limit = page_params(request, JOB)
        return Response(cursor_page(Job.objects.filter(owner=request.user), after, limit, job_object))

    def post(self, request):
        return Response(job_object(create_job(request)))


class JobView(OpenAIView):
    def get(self, request, job_id: str):
        return Response(job_object(own_job(request, job_id)))


class JobCancelView(OpenAIView):
    def post(self, request, job_id: str):
        """A queued job ends at once, a running one is told to stop; a finished one is answered as it is."""
        return Response(job_object(cancel(own_job(request, job_id))))


class JobEventsView(OpenAIView):
    def get(self, request, job_id: str):
        job = own_job(request, job_id)
        after, limit = page_params(request, EVENT)
        return Response(cursor_page(JobEvent.objects.filter(job=job), after, limit, event_object))


class JobCheckpointsView(OpenAIView):
    def get(self, request, job_id: str):
        job = own_job(request, job_id)
        after, limit = page_params(request, CHECKPOINT, default=10)
        return Response(cursor_page(own_checkpoints(job), after, limit, lambda row: checkpoint_object(request, row)))
