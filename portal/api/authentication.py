"""`Authorization: Bearer <token>` authentication against hashed API tokens, with the lookup cached.

Every API request authenticates, so the token -> (token, user) lookup is kept in Django's cache (Redis,
shared by all web workers; portal.cache fails open to the database) for TOKEN_CACHE_SECONDS: a cached
answer is a Redis GET instead of a query over two tables. What makes a cached token stop working:

- expiry is checked on every request against the cached `expires_at`: an expired token stops at once;
- a token of an account whose e-mail is not confirmed (when sign-in needs that) is refused, with the reason,
  and never cached, so confirming counts at once (#28); a change of the account's addresses drops its entries;
- revoking (ApiToken.revoke(): the API, the dashboard, the admin action) drops the entry at once, and so
  does saving or deleting a token or its user (the receivers below: admin edits, deactivation, deletion);
- any other change (a bulk update of tokens) is seen within TOKEN_CACHE_SECONDS at most, when the
  entry expires.

A token's answers are in its owner's saved language (Preferences.language, cached with the token and
dropped when it changes), else the request's Accept-Language: UserLocaleMiddleware runs before DRF
authenticates a token, so it can't apply the owner's language to token requests (docs/I18N.md).

Only good tokens are cached; an unknown, revoked or expired one is looked up every time (and throttled).
"""

from __future__ import annotations

from datetime import timedelta

from allauth.account.models import EmailAddress
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from django.utils import timezone, translation
from django.utils.translation import gettext as _
from rest_framework import authentication, exceptions

from base.models import Preferences
from base.tokens import hash_token
from portal.api.sign_in import UNCONFIRMED, SignInRefused, is_confirmed
from portal.locale import GATEWAY_PATH
from portal.models import ApiToken
from portal.models.tokens import token_cache_key

# Write last_used_at at most once a minute per token, not on every request.
LAST_USED_RESOLUTION = timedelta(minutes=1)
# How long a looked-up token is trusted without asking the database again (see the module docstring).
TOKEN_CACHE_SECONDS = 5


def forget_token(token: ApiToken) -> None:
    """Drop the cached lookup of `token`: its next request reads the database."""
    cache.delete(token_cache_key(token.token_hash))


def forget_tokens_of(user) -> None:
    hashes = ApiToken.objects.filter(user=user).values_list("token_hash", flat=True)
    cache.delete_many([token_cache_key(token_hash) for token_hash in hashes])


@receiver([post_save, post_delete], sender=ApiToken, dispatch_uid="api-token-cache-token")
def _token_changed(sender, instance: ApiToken, **kwargs) -> None:
    forget_token(instance)


@receiver(post_save, sender=get_user_model(), dispatch_uid="api-token-cache-user")
def _user_changed(sender, instance, created: bool = False, **kwargs) -> None:
    """A deactivated (or otherwise changed) user's tokens are looked up afresh; a new user has none."""
    if not created:
        forget_tokens_of(instance)


@receiver([post_save, post_delete], sender=Preferences, dispatch_uid="api-token-cache-preferences")
def _preferences_changed(sender, instance: Preferences, **kwargs) -> None:
    """A changed saved language: the user's tokens answer in it from their next request."""
    forget_tokens_of(instance.user_id)


def saved_language(user) -> str:
    """The user's saved language ("" for none: the request's Accept-Language decides)."""
    return Preferences.objects.filter(user=user).values_list("language", flat=True).first() or ""


@receiver([post_save, post_delete], sender=EmailAddress, dispatch_uid="api-token-cache-email")
def _email_changed(sender, instance: EmailAddress, **kwargs) -> None:
    """An address confirmed, unconfirmed (the admin) or removed: the user's tokens are looked up afresh."""
    forget_tokens_of(instance.user_id)


def looked_up(token_hash: str) -> ApiToken | None:
    """The token with its user: from the cache, else the database (then cached if it is usable)."""
    key = token_cache_key(token_hash)
    token = cache.get(key)
    if token is not None:
        return token
    token = ApiToken.objects.select_related("user").filter(token_hash=token_hash).first()
    if token is None:
        return None
    token.user_confirmed = is_confirmed(token.user)  # cached with the token
    token.user_language = saved_language(token.user)  # so is this
    if token.revoked_at is None and token.user.is_active and token.user_confirmed:
        cache.set(key, token, TOKEN_CACHE_SECONDS)
    return token


class BearerTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1").split()
        if not header or header[0].lower() != self.keyword.lower():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed(_("Malformed Authorization header: use 'Bearer <token>'."))
        token = looked_up(hash_token(header[1]))
        if token is None:
            raise exceptions.AuthenticationFailed(_("Invalid API token."))
        if token.revoked_at is not None:
            raise exceptions.AuthenticationFailed(_("This API token has been revoked."))
        now = timezone.now()
        if token.expires_at is not None and token.expires_at <= now:
            raise exceptions.AuthenticationFailed(_("This API token has expired."))
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed(_("This account is disabled."))
        if not token.user_confirmed:
            raise SignInRefused(UNCONFIRMED, code="email_unconfirmed")
        speak_language_of(request, token)
        if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
            token.last_used_at = now
            cache.set(token_cache_key(token.token_hash), token, TOKEN_CACHE_SECONDS)
        return token.user, token

    def authenticate_header(self, request) -> str:
        return self.keyword


def speak_language_of(request, token: ApiToken) -> None:
    """Answer in the token owner's saved language, as UserLocaleMiddleware does for a signed-in page."""
    language = getattr(token, "user_language", "")
    if language and not request.path.startswith(GATEWAY_PATH):  # the gateway speaks OpenAI's English
        translation.activate(language)
        request._request.LANGUAGE_CODE = translation.get_language()
