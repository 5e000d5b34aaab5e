// The playground: chat with a deployment through the gateway (POST /v1/chat/completions as the signed-in user,
// with the CSRF token), streamed: OpenAI's server-sent chunks (`data: {...}` lines, `data: [DONE]` last) read
// from the response body as they arrive. After each answer: the time to its first token and its tokens/s.
(() => {
  const form = document.getElementById("chat-form");
  const settings = document.getElementById("playground-settings");
  if (!form || !settings) return;
  const log = document.getElementById("chat-log");
  const stats = document.getElementById("chat-stats");
  const input = form.elements.message;
  const send = form.querySelector("[type=submit]");
  const stop = form.querySelector("[data-stop]");
  const csrf = settings.querySelector("[name=csrfmiddlewaretoken]").value;
  // Django's JavaScript catalog (/i18n/catalog.js, loaded by base.html); English as it is without it.
  const gettext = window.gettext || ((text) => text);
  const ngettext = window.ngettext || ((one, many, count) => (count === 1 ? one : many));
  const interpolate = window.interpolate || ((text, values) => text.replace(/%\((\w+)\)s/g, (_, name) => values[name]));
  const say = (text, values) => interpolate(text, values, true);
  const history = []; // the conversation so far, without the system prompt (read fresh for every message)
  let controller = null;

  const ROLES = { user: gettext("You"), assistant: gettext("Model"), error: gettext("Error") };

  function bubble(role, text) {
    log.querySelector(".chat-empty")?.remove();
    const item = document.createElement("div");
    item.className = `chat-message chat-${role}`;
    item.dataset.role = role;
    const who = document.createElement("span");
    who.className = "chat-role";
    who.textContent = ROLES[role];
    const body = document.createElement("div");
    body.className = "chat-text";
    body.textContent = text;
    item.append(who, body);
    log.append(item);
    log.scrollTop = log.scrollHeight;
    return item;
  }

  function number(field, fallback) {
    const value = Number(field.value);
    return field.value !== "" && Number.isFinite(value) ? value : fallback;
  }

  function request() {
    const system = settings.elements.system.value.trim();
    return {
      model: form.dataset.model,
      messages: system ? [{ role: "system", content: system }, ...history] : [...history],
      stream: true,
      max_tokens: Math.max(1, Math.round(number(settings.elements.max_tokens, 128))),
      temperature: number(settings.elements.temperature, 0.7),
    };
  }

  // An error answer's message: OpenAI's {"error": {"message"}}, else the text; a cold start's Retry-After too.
  async function errorOf(response) {
    let text = await response.text();
    try {
      const body = JSON.parse(text);
      text = body.error?.message || body.detail || text;
    } catch {
      // not JSON: the text as it is
    }
    const retry = response.headers.get("Retry-After");
    return `${response.status}: ${text}${retry ? ` ${say(gettext("Try again in %(seconds)s s."), { seconds: retry })}` : ""}`;
  }

  // The `data:` payloads of a server-sent event stream, as the body's bytes arrive.
  async function* events(body) {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, end).replace(/\r$/, "");
        buffer = buffer.slice(end + 1);
        if (line.startsWith("data:")) yield line.slice(5).trim();
      }
    }
    if (buffer.startsWith("data:")) yield buffer.slice(5).trim();
  }

  const ms = (value) => (value < 1000 ? `${Math.round(value)} ms` : `${(value / 1000).toFixed(2)} s`);

  function summary(timing) {
    const { started, first, ended, tokens } = timing;
    const total = say(gettext("%(time)s in all"), { time: ms(ended - started) });
    if (first === null) return `${gettext("No tokens")} · ${total}`;
    const generating = (ended - first) / 1000;
    const rate = generating > 0 ? `${(tokens / generating).toFixed(1)} tokens/s` : "—";
    const count = say(ngettext("%(count)s token", "%(count)s tokens", tokens), { count: tokens });
    return `${say(gettext("Time to first token %(time)s"), { time: ms(first - started) })} · ${rate} · ${count} · ${total}`;
  }

  function busy(on) {
    send.disabled = on;
    stop.hidden = !on;
    input.readOnly = on;
  }

  async function ask(text) {
    history.push({ role: "user", content: text });
    bubble("user", text);
    const answer = bubble("assistant", "");
    const answerText = answer.querySelector(".chat-text");
    answer.classList.add("chat-pending");
    stats.textContent = gettext("Waiting for the first token…");
    controller = new AbortController();
    busy(true);
    const timing = { started: performance.now(), first: null, ended: null, tokens: 0 };
    let content = "";
    let usage = null;
    try {
      const response = await fetch(form.dataset.url, {
        method: "POST",
        credentials: "same-origin",
        signal: controller.signal,
        headers: { "Content-Type": "application/json", Accept: "text/event-stream", "X-CSRFToken": csrf },
        body: JSON.stringify(request()),
      });
      if (!response.ok) throw new Error(await errorOf(response));
      for await (const data of events(response.body)) {
        if (data === "[DONE]") break;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new Error(chunk.error.message || gettext("The deployment failed to answer."));
        if (chunk.usage) usage = chunk.usage;
        const delta = chunk.choices?.[0]?.delta?.content;
        if (!delta) continue;
        timing.first ??= performance.now();
        timing.tokens += 1;
        content += delta;
        answerText.textContent = content;
        log.scrollTop = log.scrollHeight;
      }
      timing.ended = performance.now();
      if (usage?.completion_tokens) timing.tokens = usage.completion_tokens;
      stats.textContent = summary(timing);
    } catch (error) {
      timing.ended = performance.now();
      if (error.name === "AbortError") {
        stats.textContent = `${gettext("Stopped.")} ${summary(timing)}`;
      } else {
        answer.classList.add("chat-error");
        answer.querySelector(".chat-role").textContent = ROLES.error;
        answerText.textContent = content ? `${content}\n\n${error.message}` : error.message;
        stats.textContent = "";
      }
    } finally {
      answer.classList.remove("chat-pending");
      controller = null;
      busy(false);
    }
    if (content) history.push({ role: "assistant", content });
    else history.pop(); // unanswered: the next message is not sent after it
    answer.dataset.done = "true";
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const text = input.value.trim();
    if (!text || controller) return;
    input.value = "";
    ask(text);
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      form.requestSubmit();
    }
  });
  stop.addEventListener("click", () => controller?.abort());
  settings.addEventListener("submit", (event) => event.preventDefault());
  settings.querySelector("[data-clear-chat]").addEventListener("click", () => {
    controller?.abort();
    history.length = 0;
    log.replaceChildren();
    stats.textContent = "";
  });
})();
