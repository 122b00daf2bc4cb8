// Forms marked data-confirm="question" ask before they submit (no inline handlers: the
// Content-Security-Policy allows scripts from files only).
document.addEventListener("submit", (event) => {
  const question = event.target.dataset && event.target.dataset.confirm;
  if (question && !window.confirm(question)) event.preventDefault();
});
