from billing.models.ledger import Account, AppendOnlyError, Entry, Transaction
from billing.models.operator_settings import OperatorSettings
from billing.models.payments import Payment, PaymentStatus, Refund, StripeEvent
from billing.models.prices import Price, SpotPrice
from billing.models.usage import Charge

__all__ = [
    "Account",
    "AppendOnlyError",
    "Charge",
    "Entry",
    "OperatorSettings",
    "Payment",
    "PaymentStatus",
    "Price",
    "Refund",
    "SpotPrice",
    "StripeEvent",
    "Transaction",
]
