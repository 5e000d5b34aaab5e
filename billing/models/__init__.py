from billing.models.ledger import Account, AppendOnlyError, Entry, Transaction
from billing.models.operator_settings import OperatorSettings
from billing.models.prices import Price

__all__ = ["Account", "AppendOnlyError", "Entry", "OperatorSettings", "Price", "Transaction"]
