from billing.models.invoices import InvoiceDetails, InvoiceRequest, InvoiceStatus, PaymentMethodType, Receipt
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
    "InvoiceDetails",
    "InvoiceRequest",
    "InvoiceStatus",
    "NotificationSettings",
    "OperatorSettings",
    "Payment",
    "PaymentMethodType",
    "PaymentStatus",
    "Price",
    "Receipt",
    "Refund",
    "SentNotification",
    "SpotPrice",
    "StripeEvent",
    "Transaction",
]
