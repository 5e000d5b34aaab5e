// Copy buttons: <button data-copy="#element-id"> copies that element's text.
document.addEventListener("click", async (event) => {
  const button = event.target.closest("[data-copy]");
  if (!button) return;
  const source = document.querySelector(button.dataset.copy);
  if (!source) return;
  try {
    await navigator.clipboard.writeText(source.textContent.trim());
    button.textContent = gettext("Copied");
  } catch {
    // No clipboard access (plain HTTP, old browser): select the text so Ctrl-C works.
    window.getSelection().selectAllChildren(source);
    button.textContent = gettext("Press Ctrl-C");
  }
});

// Print buttons: <button data-print> (no inline onclick: the Content-Security-Policy runs no inline script).
document.addEventListener("click", (event) => {
  if (event.target.closest("[data-print]")) window.print();
});

// Ticking a checkbox inside [data-check-requote] sends that element a "requote" event, which its hx-trigger
// listens for (an htmx trigger filter such as change[target.type=='checkbox'] needs eval, which the CSP refuses).
document.addEventListener("change", (event) => {
  if (event.target.type !== "checkbox") return;
  const box = event.target.closest("[data-check-requote]");
  if (box) box.dispatchEvent(new CustomEvent("requote"));
});
