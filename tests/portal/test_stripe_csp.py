"""What the billing page's Content-Security-Policy lets Stripe.js load: Stripe's own hosts for real
Stripe (the Payment Element's frames, API and payment-method images), only the stand-in's origin otherwise."""

from portal.content_policy import stripe_directives


def test_real_stripe_gets_its_subdomains_frames_and_payment_method_images():
    allowed = stripe_directives("https://js.stripe.com/v3/", "https://api.stripe.com")
    assert allowed["script-src"] == ["https://js.stripe.com", "https://*.js.stripe.com"]
    assert "https://hooks.stripe.com" in allowed["frame-src"]
    assert allowed["connect-src"] == ["https://api.stripe.com", "https://js.stripe.com"]
    assert allowed["img-src"] == ["https://*.stripe.com"]


def test_a_stand_in_gets_only_its_own_origin():
    allowed = stripe_directives("http://127.0.0.1:8420/js.stripe.com/v3/", "http://127.0.0.1:8420")
    assert allowed["script-src"] == ["http://127.0.0.1:8420"] and "img-src" not in allowed
