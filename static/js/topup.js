// Top-up: create a PaymentIntent on the server, have the payment confirmed, then poll until the
// signed webhook has credited the wallet. Credit never comes from this page.
//
// Two ways, chosen by the server (data-element):
// - "payment": Stripe's Payment Element on the intent (card, Alipay, WeChat Pay). The first submit
//   creates the intent and mounts the element; the second confirms it in the browser. Alipay leaves
//   the page and comes back with ?payment_intent=...; WeChat Pay shows its QR code over the page.
// - "card": a stand-in Stripe.js that has only a card element (localstripe, Stripe test mode under
//   `make run`): the card is tokenised here and the server confirms the intent with the token.
//
// Once a payment succeeds the form is emptied and locked until "New top-up": with the card still
// filled in, one more click on Pay would charge it again. The balance, the payments and the ledger
// are refreshed in place when the credit lands.
(() => {
  const form = document.getElementById("topup-form");
  if (!form || typeof Stripe === "undefined") return;
  // Django's JavaScript catalog (/i18n/catalog.js, loaded by base.html); English as it is without it.
  const gettext = window.gettext || ((text) => text);
  const interpolate = window.interpolate || ((text, values) => text.replace(/%\((\w+)\)s/g, (_, name) => values[name]));

  // Stripe's own fields and messages in the page's language ("zh" for zh-hans; "auto" otherwise).
  const stripe = Stripe(form.dataset.publishableKey, { locale: document.documentElement.lang.startsWith("zh") ? "zh" : "auto" });
  const usePaymentElement = form.dataset.element === "payment";
  const newCard = () => {
    const element = stripe.elements().create("card");
    element.mount("#card-element");
    return element;
  };
  let card = usePaymentElement ? null : newCard();

  const amountError = document.getElementById("amount-error");
  const topupError = document.getElementById("topup-error");
  const statusLine = document.getElementById("topup-status");
  const submit = document.getElementById("topup-submit");
  const balance = document.getElementById("balance");
  const paymentField = document.getElementById("payment-field");
  const changeAmount = document.getElementById("topup-change");
  const newTopup = document.getElementById("topup-new");
  const csrf = form.querySelector("[name=csrfmiddlewaretoken]").value;

  const show = (el, text) => { el.textContent = text; el.hidden = !text; };
  const urlFor = (template, id) => template.replace("/PI/", `/${encodeURIComponent(id)}/`);
  const freshNonce = () => (window.crypto && crypto.randomUUID ? crypto.randomUUID() : `${Date.now()}-${Math.random().toString(36).slice(2)}`);

  // The Payment Element's state: the intent it is mounted on, and its elements group.
  let pending = null;
  // A payment went through: nothing more is charged from this form until the user starts a new top-up.
  let paid = false;

  async function post(url, data) {
    const body = new URLSearchParams({ csrfmiddlewaretoken: csrf, ...data });
    const response = await fetch(url, { method: "POST", body, headers: { "X-CSRFToken": csrf }, credentials: "same-origin" });
    const json = await response.json().catch(() => ({ detail: interpolate(gettext("The server answered %(status)s."), { status: response.status }, true) }));
    return { ok: response.ok, status: response.status, json };
  }

  async function waitForCredit(id) {
    for (let i = 0; i < 120; i += 1) {
      const response = await fetch(urlFor(form.dataset.statusUrl, id), { credentials: "same-origin" });
      const state = await response.json().catch(() => ({}));
      if (state.balance) {
        balance.textContent = state.balance;
        balance.title = state.balance_exact || "";
      }
      if (state.credited) return true;
      if (state.status === "failed") return false;
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
    return false;
  }

  async function announceCredit(id, amount) {
    lockForm();
    show(statusLine, gettext("Payment received, credit will appear shortly."));
    const credited = await waitForCredit(id);
    const added = amount
      ? interpolate(gettext("Payment received: %(amount)s added to your balance."), { amount: `${form.dataset.symbol}${amount}` }, true)
      : gettext("Payment received: the credit was added to your balance.");
    show(statusLine, credited
      ? added
      : gettext("Payment received; the credit is taking longer than usual. Refresh this page in a minute."));
    await refreshHistory();
  }

  function lockForm() {
    paid = true;
    form.amount.value = "";
    form.amount.disabled = true;
    submit.disabled = true;
    if (card) { card.destroy(); card = null; }  // a new top-up gets an empty card field
    newTopup.hidden = false;
  }

  function startNewTopup() {
    paid = false;
    form.amount.disabled = false;
    submit.disabled = false;
    if (!usePaymentElement) card = newCard();
    newTopup.hidden = true;
    show(statusLine, ""); show(topupError, "");
    form.amount.focus();
  }

  // The payments list and the ledger as the server has them now, swapped into this page.
  async function refreshHistory() {
    const response = await fetch(window.location.pathname, { credentials: "same-origin" }).catch(() => null);
    if (!response || !response.ok) return;
    const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
    for (const selector of ["#payments-section", "#ledger", "[data-testid=header-balance]"]) {
      const current = document.querySelector(selector);
      const next = fresh.querySelector(selector);
      if (!current || !next) continue;
      current.replaceWith(next);
      if (window.htmx) window.htmx.process(next);  // the ledger's groups open with hx-get
    }
  }

  async function createIntent() {
    const created = await post(form.action, { amount: form.amount.value, nonce: form.nonce.value });
    if (!created.ok) {
      const amountErrors = (created.json.errors || {}).amount;
      if (amountErrors) {
        form.querySelector("#amount-field").classList.add("field-invalid");
        show(amountError, amountErrors.join(" "));
      } else {
        show(topupError, created.json.detail || gettext("The top-up could not be started."));
      }
      return null;
    }
    // A new intent for the next attempt: a declined intent cannot take another card here.
    form.nonce.value = freshNonce();
    return created.json;
  }

  async function payByCardToken() {
    const intent = await createIntent();
    if (!intent) return;
    const { token, error } = await stripe.createToken(card);
    if (error) { show(topupError, error.message || gettext("The card could not be read.")); return; }

    const confirmed = await post(urlFor(form.dataset.confirmUrl, intent.id), { token: token.id });
    if (!confirmed.ok) { show(topupError, confirmed.json.detail || gettext("The payment failed.")); return; }
    if (confirmed.json.status === "requires_action") {
      const result = await stripe.confirmCardPayment(intent.client_secret);
      if (result.error) { show(topupError, result.error.message || gettext("Card authentication failed.")); return; }
    }
    await announceCredit(intent.id, intent.amount);
  }

  function resetPaymentElement() {
    if (pending) pending.element.destroy();
    pending = null;
    paymentField.hidden = true;
    form.amount.readOnly = false;
    submit.textContent = gettext("Continue");
  }

  async function mountPaymentElement() {
    const intent = await createIntent();
    if (!intent) return;
    const elements = stripe.elements({ clientSecret: intent.client_secret });
    const element = elements.create("payment", { layout: "tabs" });
    element.mount("#payment-element");
    pending = { intent, elements, element };
    paymentField.hidden = false;
    form.amount.readOnly = true;
    submit.textContent = `${submit.dataset.payLabel} ${form.dataset.symbol}${intent.amount}`;
  }

  async function confirmPaymentElement() {
    const { intent, elements } = pending;
    const back = new URL(window.location.href);
    back.search = "";
    back.hash = "";
    // Alipay (and a card needing a bank's page) leave the page; the others resolve here.
    const { error, paymentIntent } = await stripe.confirmPayment({
      elements,
      confirmParams: { return_url: back.toString() },
      redirect: "if_required",
    });
    if (error) { show(topupError, error.message || gettext("The payment failed.")); return; }
    if (paymentIntent && paymentIntent.status === "requires_payment_method") {
      show(topupError, gettext("The payment was not completed; choose a payment method and try again."));
      return;
    }
    resetPaymentElement();
    await announceCredit(intent.id, intent.amount);
  }

  // Back from a redirect (Alipay, a bank's page): Stripe.js appended the intent to the return URL.
  async function resumeAfterRedirect() {
    const params = new URLSearchParams(window.location.search);
    const id = params.get("payment_intent");
    if (!id || !/^pi_\w+$/.test(id)) return;
    window.history.replaceState(null, "", window.location.pathname);
    if (params.get("redirect_status") === "failed") {
      show(topupError, gettext("The payment was not completed; nothing was charged. Please try again."));
      return;
    }
    await announceCredit(id, "");
  }

  if (changeAmount) changeAmount.addEventListener("click", resetPaymentElement);
  newTopup.addEventListener("click", startNewTopup);

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (paid) return;
    show(amountError, ""); show(topupError, ""); show(statusLine, "");
    form.querySelector("#amount-field").classList.remove("field-invalid");
    submit.disabled = true;
    try {
      if (!usePaymentElement) await payByCardToken();
      else if (pending) await confirmPaymentElement();
      else await mountPaymentElement();
    } catch (err) {
      show(topupError, gettext("Something went wrong talking to the payment service. Please try again."));
    } finally {
      submit.disabled = paid;
    }
  });

  if (usePaymentElement) resumeAfterRedirect();
})();
