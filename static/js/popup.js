// A button that opens a group of controls over the page (Options…, More…, the measures' help, the panels' menu):
// Escape or a click elsewhere closes it. Returns show(open), to close it from outside too.

export function bindPopup(toggle, group) {
  const show = (open) => {
    group.classList.toggle("open", open);
    toggle.setAttribute("aria-expanded", String(open));
  };
  toggle.addEventListener("click", () => show(!group.classList.contains("open")));
  const escape = (event) => {
    if (event.key !== "Escape" || !group.classList.contains("open")) return;
    event.stopPropagation();
    show(false);
    toggle.focus();
  };
  group.addEventListener("keydown", escape);
  toggle.addEventListener("keydown", escape);
  document.addEventListener("click", (event) => {
    if (group.classList.contains("open") && !group.contains(event.target) && !toggle.contains(event.target)) show(false);
  });
  return show;
}
