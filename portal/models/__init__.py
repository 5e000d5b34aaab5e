from portal.models.tokens import ApiToken, TokenScope, hash_token

__all__ = ["ApiToken", "TokenScope", "hash_token"]
