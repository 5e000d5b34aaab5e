"""Stripe payments: top-ups (`topups`), webhooks (`webhooks`) and refunds (`refunds`); what they share in
`config`.

Money moves only here and only after re-reading the PaymentIntent from Stripe: a webhook's body
says which object changed, never how much to credit. Every outgoing call that
creates something carries a deterministic idempotency key, and every ledger posting has one too
(`topup:{payment_intent_id}`), so a duplicate, reordered or replayed event credits once.

Two ways to pay, one server flow: with real Stripe.js the page uses the Payment Element
(`stripe.confirmPayment`, card, Alipay or WeChat Pay for yuan: Alipay redirects back, WeChat Pay
shows a QR code); against localstripe's stand-in, which only has a card element, the page
tokenises the card and this server confirms the intent (`confirm_topup`). Either way the credit
comes only from the `payment_intent.succeeded` webhook.
"""
