// Shared helpers for the interactive widgets: page lifecycle, site-relative URLs, number formatting,
// small DOM builders, and an editable matrix (used by the attention explorer and the tile stepper).

// Where the site serves Pyodide's core runtime (copied from the npm `pyodide` package at build time).
const PYODIDE_DIR = "assets/vendor/pyodide/";

// This file is <site>/javascripts/interactive/common.js, so the site root is two folders up. Resolving
// against the script's own URL works under any base URL and on pages at any depth.
const SITE_ROOT = new URL("../../", import.meta.url);

export function siteUrl(path) {
  return new URL(path, SITE_ROOT).href;
}

export const pyodideIndexUrl = () => siteUrl(PYODIDE_DIR);

// Run `init(root)` once for every element matching `selector`, now and after each instant-navigation page
// swap (mkdocs-material publishes those on `document$`; without it, the page loads once).
export function onEachPage(selector, init) {
  const run = () => {
    for (const root of document.querySelectorAll(selector)) {
      if (root.dataset.fdReady) continue;
      root.dataset.fdReady = "true";
      try {
        init(root);
      } catch (err) {
        root.dataset.fdReady = "error";
        root.textContent = `This interactive piece failed to start: ${err.message}`;
        throw err;
      }
    }
  };
  if (window.document$ && typeof window.document$.subscribe === "function") {
    window.document$.subscribe(run);
  } else if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", run, { once: true });
  } else {
    run();
  }
}

// Numbers as readers expect them: a real minus sign, ∞ for masked scores, no "-0.000".
export function fmt(x, digits = 3) {
  if (x === Infinity) return "∞";
  if (x === -Infinity) return "−∞";
  if (Number.isNaN(x)) return "NaN";
  let s = x.toFixed(digits);
  if (/^-0\.?0*$/.test(s)) s = s.slice(1);
  return s.replace("-", "−");
}

let idCounter = 0;
export function uid(prefix) {
  idCounter += 1;
  return `${prefix}-${idCounter}`;
}

// h("div", {class: "x", onclick: f}, child, "text") — a tiny element builder.
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else if (key === "text") el.textContent = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else el.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

// A read-only matrix as a table. `cell(value, i, j)` may return {text, title, style, class}.
export function matrixTable({ caption, rowLabels, colLabels, values, digits = 3, cell, className = "" }) {
  const table = h("table", { class: `fd-matrix ${className}` });
  if (caption) table.append(h("caption", {}, caption));
  const head = h("tr", {}, h("td", { class: "fd-matrix__corner" }));
  for (const label of colLabels) head.append(h("th", { scope: "col" }, label));
  table.append(h("thead", {}, head));
  const body = h("tbody");
  values.forEach((row, i) => {
    const tr = h("tr", {}, h("th", { scope: "row" }, rowLabels[i]));
    row.forEach((v, j) => {
      const extra = cell ? cell(v, i, j) || {} : {};
      const td = h("td", { class: extra.class, title: extra.title, dataset: { value: String(v) } },
        extra.text ?? fmt(v, digits));
      if (extra.style) td.setAttribute("style", extra.style);
      tr.append(td);
    });
    body.append(tr);
  });
  table.append(body);
  return table;
}

// An editable matrix of number inputs, each labelled for screen readers ("Q, cat, dimension 1").
// Calls onChange(values) whenever a valid number is typed; invalid text is flagged and ignored.
// Entries past this size say nothing more about attention, and their products could overflow to infinity.
const MAX_ENTRY = 1e6;

export function matrixEditor({ name, rowLabels, values, onChange, step = 0.1 }) {
  const cols = values[0].length;
  const table = h("table", { class: "fd-matrix fd-matrix--edit" });
  table.append(h("caption", {}, name));
  const head = h("tr", {}, h("td", { class: "fd-matrix__corner" }));
  for (let j = 0; j < cols; j++) head.append(h("th", { scope: "col" }, `dim ${j + 1}`));
  table.append(h("thead", {}, head));
  const body = h("tbody");
  const current = values.map((row) => row.slice());
  values.forEach((row, i) => {
    const tr = h("tr", {}, h("th", { scope: "row" }, rowLabels[i]));
    row.forEach((v, j) => {
      const input = h("input", {
        type: "number",
        step: String(step),
        min: String(-MAX_ENTRY),
        max: String(MAX_ENTRY),
        value: String(v),
        inputmode: "decimal",
        "aria-label": `${name}, ${rowLabels[i]}, dimension ${j + 1}`,
        dataset: { row: String(i), col: String(j) },
      });
      input.addEventListener("input", () => {
        const x = Number.parseFloat(input.value);
        const ok = input.value.trim() !== "" && Number.isFinite(x) && Math.abs(x) <= MAX_ENTRY;
        input.setAttribute("aria-invalid", ok ? "false" : "true");
        input.title = ok ? "" : `a number from ${-MAX_ENTRY} to ${MAX_ENTRY}; the last valid one is kept`;
        if (!ok) return;
        current[i][j] = x;
        onChange(current.map((r) => r.slice()));
      });
      tr.append(h("td", {}, input));
    });
    body.append(tr);
  });
  table.append(body);
  return table;
}

// A labelled form control. The label sits beside the control, not around it, so the control's accessible
// name is just the label text (a select inside its label would also be named by its current option).
export function field(labelText, control) {
  if (!control.id) control.id = uid("fd-field");
  return h("span", { class: "fd-field" }, h("label", { for: control.id }, labelText), " ", control);
}

// Keep a wide table usable on a phone: it scrolls sideways inside its own box, the page does not.
export function scrollBox(...children) {
  return h("div", { class: "fd-scroll" }, ...children);
}
