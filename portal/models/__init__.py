from portal.models.idempotency import IDEMPOTENCY_KEY_TTL, IdempotentRequest
from portal.models.tokens import ApiToken, TokenScope, hash_token

__all__ = ["IDEMPOTENCY_KEY_TTL", "ApiToken", "IdempotentRequest", "TokenScope", "hash_token"]
