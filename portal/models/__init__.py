from portal.models.preferences import Preferences
from portal.models.tokens import ApiToken, TokenScope

__all__ = ["ApiToken", "Preferences", "TokenScope"]
