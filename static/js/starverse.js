// Copy buttons: <button data-copy="#element-id"> copies that element's text.
document.addEventListener("click", async (event) => {
  const button = event.target.closest("[data-copy]");
  if (!button) return;
  const source = document.querySelector(button.dataset.copy);
  if (!source) return;
  try {
    await navigator.clipboard.writeText(source.textContent.trim());
    button.textContent = "Copied";
  } catch {
    // No clipboard access (plain HTTP, old browser): select the text so Ctrl-C works.
    window.getSelection().selectAllChildren(source);
    button.textContent = "Press Ctrl-C";
  }
});
