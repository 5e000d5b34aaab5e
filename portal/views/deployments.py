"""Deployments' pages: the deploy form, the list, the deployment page (live, with its charts), scaling, delete,
and the playground (docs/SERVING.md, "Pages"). The rules are workers.services.deployments'; a refusal is a form
error on the field it names."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import IntegrityError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseClientRedirect

from fleet.models import Deployment
from portal.deployment_forms import DeployForm, ReplicasForm, suggested_name
from portal.views.deployment_charts import served_series
from portal.views.deployment_context import deployment_context, endpoint, owner_deployments
from workers.services.deployments import DeploymentRefused, create_deployment, stop_deployment, update_replicas


def owned_deployment(request: HttpRequest, pk: int) -> Deployment:
    """The user's deployment, or 404: another user's looks exactly like one that doesn't exist."""
    return get_object_or_404(Deployment, pk=pk, owner=request.user)


@login_required
def deployment_new(request: HttpRequest) -> HttpResponse:
    """The deploy form (`?model=job:42` or `model:7` fills it in); a deployment made goes to its page."""
    if request.method != "POST":
        model = request.GET.get("model", "").strip()[:200]
        initial = {"model": model, "name": suggested_name(request.user, model)} if model else {}
        return render(request, "portal/deployments/new.html", {"form": DeployForm(initial=initial)})
    form = DeployForm(request.POST)
    if form.is_valid() and (deployment := submit(request, form)):
        messages.success(request, deployed_message(deployment))
        return redirect("deployment", deployment.pk)
    return render(request, "portal/deployments/new.html", {"form": form}, status=400)


def submit(request: HttpRequest, form: DeployForm) -> Deployment | None:
    try:
        return create_deployment(request.user, **form.deployment_kwargs())
    except DeploymentRefused as error:
        form.add_refusal(error.field, str(error))
    except IntegrityError:  # the same name deployed at the same moment in another tab
        form.add_refusal(
            "name", _("You already have a deployment named '%(name)s'.") % {"name": form.cleaned_data["name"]}
        )
    return None


def deployed_message(deployment: Deployment) -> str:
    if deployment.min_replicas:
        return _("Deploying “%(name)s”: its replicas start as chips are placed; this page follows them live.") % {
            "name": deployment.name
        }
    return _("“%(name)s” is deployed scaled to zero: the first request starts a replica.") % {"name": deployment.name}


@login_required
def deployment_list(request: HttpRequest) -> HttpResponse:
    return render(request, "portal/deployments/list.html", {"deployments": owner_deployments(request.user)})


@login_required
def deployment_detail(request: HttpRequest, pk: int, replicas_form: ReplicasForm | None = None) -> HttpResponse:
    deployment = owned_deployment(request, pk)
    initial = {name: getattr(deployment, name) for name in ("min_replicas", "max_replicas", "idle_timeout_s")}
    context = {
        **deployment_context(deployment),
        "endpoint": endpoint(request, deployment),
        "replicas_form": replicas_form or ReplicasForm(initial=initial),
    }
    return render(request, "portal/deployments/detail.html", context, status=400 if replicas_form else 200)


@never_cache
@login_required
def deployment_live(request: HttpRequest, pk: int) -> HttpResponse:
    """The page's live section (status, counters, replicas, logs); polling stops once the deployment has ended."""
    return render(request, "partials/deployments/live.html", deployment_context(owned_deployment(request, pk)))


@never_cache
@login_required
def deployment_metrics(request: HttpRequest, pk: int) -> JsonResponse:
    """The charts' series: latency and throughput of the served requests, in time buckets."""
    return JsonResponse(served_series(owned_deployment(request, pk)))


@require_POST
@login_required
def deployment_replicas(request: HttpRequest, pk: int) -> HttpResponse:
    """New replica bounds and idle timeout; a refusal comes back on the page beside its field."""
    deployment = owned_deployment(request, pk)
    form = ReplicasForm(request.POST)
    if form.is_valid():
        try:
            deployment = update_replicas(deployment, **form.cleaned_data)
        except DeploymentRefused as error:
            form.add_refusal(error.field, str(error))
        else:
            message = ngettext(
                "“%(name)s” now keeps %(min)s to %(max)s replica.",
                "“%(name)s” now keeps %(min)s to %(max)s replicas.",
                deployment.max_replicas,
            ) % {"name": deployment.name, "min": deployment.min_replicas, "max": deployment.max_replicas}
            messages.success(request, message)
            return redirect("deployment", deployment.pk)
    return deployment_detail(request, pk, replicas_form=form)


@require_POST
@login_required
def deployment_delete(request: HttpRequest, pk: int) -> HttpResponse:
    """Stop for good: every replica is let go (their billing stops) and the name is free again."""
    deployment = stop_deployment(owned_deployment(request, pk))
    messages.success(
        request, _("Deleted “%(name)s”: its replicas are stopping and its chips let go.") % {"name": deployment.name}
    )
    target = reverse("deployments")
    return HttpResponseClientRedirect(target) if request.htmx else redirect(target)


@login_required
def deployment_playground(request: HttpRequest, pk: int) -> HttpResponse:
    """Chat with the deployment in the browser: static/js/playground.js streams from the gateway."""
    deployment = owned_deployment(request, pk)
    return render(request, "portal/deployments/playground.html", {"deployment": deployment})
