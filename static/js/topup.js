// Card top-up: create a PaymentIntent on the server, tokenise the card with Stripe.js Elements,
// let the server confirm the intent with that token, finish 3-D Secure in the browser if asked,
// then poll until the signed webhook has credited the wallet. Credit never comes from this page.
(() => {
  const form = document.getElementById("topup-form");
  if (!form || typeof Stripe === "undefined") return;

  const stripe = Stripe(form.dataset.publishableKey);
  const card = stripe.elements().create("card");
  card.mount("#card-element");

  const amountError = document.getElementById("amount-error");
  const topupError = document.getElementById("topup-error");
  const statusLine = document.getElementById("topup-status");
  const submit = document.getElementById("topup-submit");
  const balance = document.getElementById("balance");
  const csrf = form.querySelector("[name=csrfmiddlewaretoken]").value;

  const show = (el, text) => { el.textContent = text; el.hidden = !text; };
  const urlFor = (template, id) => template.replace("/PI/", `/${encodeURIComponent(id)}/`);
  const freshNonce = () => (window.crypto && crypto.randomUUID ? crypto.randomUUID() : `${Date.now()}-${Math.random().toString(36).slice(2)}`);

  async function post(url, data) {
    const body = new URLSearchParams({ csrfmiddlewaretoken: csrf, ...data });
    const response = await fetch(url, { method: "POST", body, headers: { "X-CSRFToken": csrf }, credentials: "same-origin" });
    const json = await response.json().catch(() => ({ detail: `The server answered ${response.status}.` }));
    return { ok: response.ok, status: response.status, json };
  }

  async function waitForCredit(id) {
    for (let i = 0; i < 120; i += 1) {
      const response = await fetch(urlFor(form.dataset.statusUrl, id), { credentials: "same-origin" });
      const state = await response.json().catch(() => ({}));
      if (state.balance) balance.textContent = state.balance;
      if (state.credited) return true;
      if (state.status === "failed") return false;
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
    return false;
  }

  async function pay() {
    const created = await post(form.action, { amount: form.amount.value, nonce: form.nonce.value });
    if (!created.ok) {
      const amountErrors = (created.json.errors || {}).amount;
      if (amountErrors) {
        form.querySelector("#amount-field").classList.add("field-invalid");
        show(amountError, amountErrors.join(" "));
      } else {
        show(topupError, created.json.detail || "The top-up could not be started.");
      }
      return;
    }
    const intent = created.json;
    // A new intent for the next attempt: a declined intent cannot take another card here.
    form.nonce.value = freshNonce();

    const { token, error } = await stripe.createToken(card);
    if (error) { show(topupError, error.message || "The card could not be read."); return; }

    const confirmed = await post(urlFor(form.dataset.confirmUrl, intent.id), { token: token.id });
    if (!confirmed.ok) { show(topupError, confirmed.json.detail || "The payment failed."); return; }
    if (confirmed.json.status === "requires_action") {
      const result = await stripe.confirmCardPayment(intent.client_secret);
      if (result.error) { show(topupError, result.error.message || "Card authentication failed."); return; }
    }
    show(statusLine, "Payment received, credit will appear shortly.");
    const credited = await waitForCredit(intent.id);
    show(statusLine, credited
      ? `Payment received: ${form.dataset.symbol}${intent.amount} added to your balance.`
      : "Payment received; the credit is taking longer than usual. Refresh this page in a minute.");
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    show(amountError, ""); show(topupError, ""); show(statusLine, "");
    form.querySelector("#amount-field").classList.remove("field-invalid");
    submit.disabled = true;
    try {
      await pay();
    } catch (err) {
      show(topupError, "Something went wrong talking to the payment service. Please try again.");
    } finally {
      submit.disabled = false;
    }
  });
})();
