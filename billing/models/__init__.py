from billing.models.ledger import Account, AppendOnlyError, Entry, Transaction
from billing.models.notifications import NotificationSettings, SentNotification
from billing.models.operator_settings import OperatorSettings
from billing.models.payments import Payment, PaymentStatus, Refund, StripeEvent
from billing.models.prices import Price, SpotPrice
from billing.models.usage import BillingLine, Charge

__all__ = [
    "Account",
    "AppendOnlyError",
    "BillingLine",
    "Charge",
    "Entry",
    "NotificationSettings",
    "OperatorSettings",
    "Payment",
    "PaymentStatus",
    "Price",
    "Refund",
    "SentNotification",
    "SpotPrice",
    "StripeEvent",
    "Transaction",
]
