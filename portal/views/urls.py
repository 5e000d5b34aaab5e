from django.urls import path

from market import views as market
from portal.views import billing, dashboard, datasets, jobs, models, notifications, pages, statements, training

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
    path("jobs/<int:pk>/rerun/", jobs.job_rerun, name="job_rerun"),
    path("jobs/<int:pk>/logs/", jobs.job_logs_view, name="job_logs"),
    path("jobs/<int:pk>/artifacts/<path:path>", jobs.job_artifact, name="job_artifact"),
    path("jobs/<int:pk>/model.tar", jobs.job_model, name="job_model"),
    path("datasets/", datasets.datasets, name="datasets"),
    path("models/", models.models, name="models"),
    path("models/<int:pk>/delete/", models.model_delete, name="model_delete"),
    path("bids/", market.bids, name="bids"),
    path("bids/<int:pk>/change/", market.bid_change, name="bid_change"),
    path("bids/<int:pk>/cancel/", market.bid_cancel, name="bid_cancel"),
    path("pricing/spot-history.json", market.spot_history, name="spot_history"),
    path("billing/", billing.billing, name="billing"),
    path("billing/emails/", notifications.email_settings, name="email_settings"),
    path("billing/topups/", billing.topup_create, name="topup_create"),
    path("billing/topups/<str:payment_intent_id>/confirm/", billing.topup_confirm, name="topup_confirm"),
    path("billing/topups/<str:payment_intent_id>/", billing.topup_status, name="topup_status"),
    path("billing/ledger/<int:job_id>/<int:hour>/", billing.ledger_group, name="ledger_group"),
    # Statements; /billing/ itself is the top-up page.
    path("billing/usage/", statements.usage, name="billing_usage"),
    path("billing/ledger.csv", statements.ledger_csv, name="billing_ledger_csv"),
    path("billing/usage.csv", statements.usage_csv, name="billing_usage_csv"),
    path("billing/statements/", statements.statements, name="billing_statements"),
    path("billing/statements/<str:month>/", statements.statement, name="billing_statement"),
]
