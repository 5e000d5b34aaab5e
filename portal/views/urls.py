from django.urls import path

from portal.views import dashboard, datasets, jobs, pages, training

urlpatterns = [
    path("", pages.home, name="home"),
    path("pricing/", pages.pricing, name="pricing"),
    path("dashboard/", dashboard.dashboard, name="dashboard"),
    path("dashboard/tokens/", dashboard.tokens, name="tokens"),
    path("dashboard/tokens/<int:pk>/revoke/", dashboard.revoke_token, name="token_revoke"),
    path("train/", training.train, name="train"),
    path("train/quote/", training.train_quote, name="train_quote"),
    path("jobs/", jobs.job_list, name="jobs"),
    path("jobs/<int:pk>/", jobs.job_detail, name="job"),
    path("jobs/<int:pk>/live/", jobs.job_live, name="job_live"),
    path("jobs/<int:pk>/metrics.json", jobs.job_metrics, name="job_metrics"),
    path("jobs/<int:pk>/cancel/", jobs.job_cancel, name="job_cancel"),
    path("jobs/<int:pk>/artifacts/<path:path>", jobs.job_artifact, name="job_artifact"),
    path("datasets/", datasets.datasets, name="datasets"),
]
