// The browser view's one script: the why panel, clickable rows and chart markers.
// Everything works without it (each link opens the why page); with it, the answer
// opens beside the table and focus moves there.
"use strict";

function panel() {
  return document.getElementById("why-panel");
}

async function showWhy(href) {
  const target = panel();
  if (!target) { window.location.href = href; return; }
  const body = document.getElementById("why-body");
  target.classList.add("open");
  body.setAttribute("aria-busy", "true");
  body.textContent = "Replaying the timeline…";
  try {
    const answer = await fetch(href + "&fragment=1", {credentials: "same-origin"});
    const html = await answer.text();
    const doc = new DOMParser().parseFromString(html, "text/html");
    const part = doc.querySelector(".why-report") || doc.querySelector("[data-testid=error]");
    body.replaceChildren(...(part ? [document.importNode(part, true)] : []));
    if (!part) { body.textContent = "No answer (" + answer.status + ")."; }
  } catch (error) {
    body.textContent = "The server did not answer: " + error;
  }
  body.removeAttribute("aria-busy");
  target.focus();
}

document.addEventListener("click", (event) => {
  const link = event.target.closest("a.why");
  if (link) { event.preventDefault(); showWhy(link.getAttribute("href")); return; }
  const marker = event.target.closest("a.marker");
  if (marker) { event.preventDefault(); showWhy(marker.getAttribute("href")); return; }
  // A click anywhere on a row of a clickable table asks why of the row's item.
  const row = event.target.closest("table.clickable tbody tr");
  if (row && !event.target.closest("a, button, input, select, textarea")) {
    const inner = row.querySelector("a.why");
    if (inner) { showWhy(inner.getAttribute("href")); }
  }
});

// Markers are SVG links: Enter and Space open them like a button.
document.addEventListener("keydown", (event) => {
  const marker = event.target.closest && event.target.closest("a.marker");
  if (marker && (event.key === "Enter" || event.key === " ")) {
    event.preventDefault();
    showWhy(marker.getAttribute("href"));
  }
});
