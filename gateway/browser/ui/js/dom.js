// Building DOM from data without innerHTML, so names and outputs from the
// fleet are always text, never markup.

export function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") node.addEventListener(name.slice(2), value);
    else if (name === "dataset") Object.assign(node.dataset, value);
    else if (name === "style" && typeof value === "object") Object.assign(node.style, value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(node, child);
    else node.append(child instanceof Node ? child : String(child));
  }
}

// Replace a container's children, keeping focus on an element with the same
// data-focus key if it had it (a refresh must not throw the keyboard user out).
export function replace(container, ...children) {
  const active = document.activeElement;
  const key = active && container.contains(active) ? active.dataset.focus : undefined;
  container.replaceChildren();
  append(container, children);
  if (key) container.querySelector(`[data-focus="${CSS.escape(key)}"]`)?.focus();
}

// A labelled control: the label names it (for=id) without wrapping it, so the
// control's own text (a select's options) never leaks into its name.
export function field(text, control) {
  return h("div", { class: "field" }, h("label", { for: control.id }, text), control);
}
