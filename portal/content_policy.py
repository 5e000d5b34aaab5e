"""The Content-Security-Policy pages carry (django-csp), and the Stripe.js exception of the billing page.

Only our own scripts and styles run: no inline script and no <style> element, so injected markup
can't execute. Exceptions, each needed: style attributes (progress bars set their width inline),
`data:` images (the TOTP QR code), and, on the billing page only, Stripe.js: its script, frames
and API at the origins the platform is configured with (localstripe's in tests), read per request.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from csp.constants import NONE, SELF, UNSAFE_INLINE
from django.conf import settings

if TYPE_CHECKING:  # the settings module imports this one: nothing here may need settings loaded
    from django.http import HttpRequest, HttpResponse

STRIPE_HOOKS = "https://hooks.stripe.com"  # 3-D Secure frames

CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "style-src-attr": [UNSAFE_INLINE],
        "img-src": [SELF, "data:"],
        "font-src": [SELF],
        "connect-src": [SELF],
        "frame-src": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
        "base-uri": [SELF],
        "object-src": [NONE],
    }
}


def origin(url: str) -> str:
    """'https://js.stripe.com/v3/' -> 'https://js.stripe.com'."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def stripe_directives(js_url: str, api_base: str) -> dict[str, list[str]]:
    """What Stripe.js needs, at the configured origins; Stripe's own loads from its subdomains too."""
    js, api = origin(js_url), origin(api_base)
    if js != "https://js.stripe.com":
        return {"script-src": [js], "frame-src": [js, STRIPE_HOOKS], "connect-src": [api, js]}
    scripts = [js, "https://*.js.stripe.com"]
    # The Payment Element's wallets and payment-method logos (Alipay, WeChat Pay) are images on Stripe's hosts.
    return {
        "script-src": scripts,
        "frame-src": [*scripts, STRIPE_HOOKS],
        "connect-src": [api, js],
        "img-src": ["https://*.stripe.com"],
    }


def allow_stripe(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Let this page load Stripe.js (django-csp's per-response update, from the settings of the moment)."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        response = view(request, *args, **kwargs)
        update = dict(getattr(response, "_csp_update", None) or {})
        for directive, sources in stripe_directives(settings.STRIPE_JS_URL, settings.STRIPE_API_BASE).items():
            update[directive] = [*update.get(directive, []), *sources]
        response._csp_update = update
        return response

    return wrapper
