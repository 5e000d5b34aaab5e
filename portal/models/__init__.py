from portal.models.tokens import ApiToken, TokenScope

__all__ = ["ApiToken", "TokenScope"]
