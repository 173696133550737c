// FlashAttention tile stepper: <div class="fd-tile-stepper"></div>
//
// Steps through the forward pass one key block at a time. Every block of query rows is a "worker" (one GPU
// program instance); the workers run side by side, each through the key blocks in order, and each shows its
// score tile S, P = exp(S − m_new), the running max m, the rescale factor α, the denominator ℓ and the
// unnormalised output O. After the last key block, O / ℓ is compared with the full softmax.
//
// Attributes (all optional):
//   data-trace="url"      page-relative URL of a recorded trace (default: the 4×4 worked example recorded by
//                         snippets/flashattention/worked_example.py). Only its inputs are used — Q, K, V,
//                         scale, block — every step is computed here and then checked against the recording.
//   data-mode="reader"    a reader-sized example instead: choose N, d, block size, the causal mask, and random
//                         or hand-edited inputs; starting values from data-n, data-d, data-block, data-seed
//                         (defaults 6, 3, 2, 1).
// The element exposes what it computed as `element.flashdocTrace` (the recorded trace's schema, plus the
// full-softmax `reference`) and the position as `element.flashdocStep` (0 = before the first key block).

import { attention, maxAbsDiff, randomMatrix, seededRandom, tiledAttention } from "./attention-math.js";
import { field, h, matrixEditor, matrixTable, onEachPage, scrollBox, siteUrl, uid } from "./common.js";

const WORKED_EXAMPLE = "generated/flashattention/worked_example/trace.json";
const DIGITS = 3;

// Labels count from 1, like the worked example's text (worker 1, rows 1–2, tile S₁₂); the data count from 0.
const range = (list) => (list.length === 1 ? `${list[0] + 1}` : `${list[0] + 1}–${list[list.length - 1] + 1}`);
// The same after its noun, singular for one item: "key 7", "keys 5–6", "row 7", "rows 1–3".
const counted = (noun, list) => `${noun}${list.length === 1 ? "" : "s"} ${range(list)}`;
const SUB = "₀₁₂₃₄₅₆₇₈₉";
const sub = (n) => String(n).replace(/\d/g, (c) => SUB[c]);
const blank = (rows, cols) => Array.from({ length: rows }, () => new Array(cols).fill(null));
const placeholder = (v) => (v === null ? { text: "·", title: "not computed yet" } : null);

// Largest |a − b| over every number of every step (m_old "-inf" in JSON is −∞ here). Infinite values must
// agree exactly; a missing or extra step counts as a mismatch.
function traceDifference(computed, recorded) {
  let worst = 0;
  const compare = (a, b) => {
    if (Array.isArray(a)) {
      if (!Array.isArray(b) || a.length !== b.length) { worst = Infinity; return; }
      a.forEach((x, i) => compare(x, b[i]));
      return;
    }
    const y = b === "-inf" ? -Infinity : b === "inf" ? Infinity : b;
    if (!Number.isFinite(a) || !Number.isFinite(y)) { if (a !== y) worst = Infinity; return; }
    worst = Math.max(worst, Math.abs(a - y));
  };
  if (computed.workers.length !== recorded.workers.length) return Infinity;
  computed.workers.forEach((w, i) => {
    const r = recorded.workers[i];
    compare(w.rows, r.rows);
    if (w.steps.length !== r.steps.length) { worst = Infinity; return; }
    w.steps.forEach((s, j) => {
      for (const key of ["k_block", "S", "m_old", "m_new", "alpha", "P", "l", "O"]) compare(s[key], r.steps[j][key]);
    });
    compare(w.output, r.output);
  });
  compare(computed.output, recorded.output);
  return worst;
}

function buildTrace({ Q, K, V, scale, block, causal }) {
  const trace = tiledAttention(Q, K, V, { scale, block, causal });
  trace.reference = attention(Q, K, V, { scale, causal }).O;
  return trace;
}

// The stepping view shared by both modes: navigation, tile map, one card per worker, and the result.
function createView(root) {
  const buttons = {
    first: h("button", { type: "button", class: "md-button", "aria-label": "First step" }, "« First"),
    prev: h("button", { type: "button", class: "md-button", "aria-label": "Previous key block" }, "◀ Back"),
    next: h("button", { type: "button", class: "md-button md-button--primary", "aria-label": "Next key block" }, "Next ▶"),
    last: h("button", { type: "button", class: "md-button", "aria-label": "Last step" }, "Last »"),
  };
  const status = h("p", { class: "fd-stepper__status", "aria-live": "polite" });
  const map = h("div", { class: "fd-stepper__map" });
  const workers = h("div", { class: "fd-stepper__workers" });
  const result = h("div", { class: "fd-stepper__result" });
  const nav = h("div", { class: "fd-controls fd-stepper__nav", role: "group", "aria-label": "Step through the key blocks" },
    buttons.first, buttons.prev, buttons.next, buttons.last);
  // Navigation and status stick under the header while the reader scrolls through the workers.
  const element = h("div", { class: "fd-stepper__view" },
    h("div", { class: "fd-stepper__bar" }, nav, status), map, workers, result);

  let trace = null;
  let position = 0;
  let total = 0;

  function go(to) {
    if (!trace) return;
    position = Math.max(0, Math.min(total, to));
    render();
  }
  buttons.first.addEventListener("click", () => go(0));
  buttons.prev.addEventListener("click", () => go(position - 1));
  buttons.next.addEventListener("click", () => go(position + 1));
  buttons.last.addEventListener("click", () => go(total));
  root.addEventListener("keydown", (event) => {
    if (event.target.closest("input, select, textarea, summary")) return;
    if (event.key === "ArrowRight") { go(position + 1); event.preventDefault(); }
    if (event.key === "ArrowLeft") { go(position - 1); event.preventDefault(); }
  });

  // The keys of a key block, first and last (just one for a one-key block, as the last one can be).
  function blockKeys(kBlock) {
    const start = kBlock * trace.block;
    const end = Math.min(start + trace.block, trace.K.length) - 1;
    return start === end ? [start] : [start, end];
  }

  function renderMap() {
    const table = h("table", { class: "fd-tilemap" },
      h("caption", {}, "Score tiles: one row per worker, one column per key block"));
    const head = h("tr", {}, h("td", { class: "fd-matrix__corner" }));
    for (let k = 0; k < total; k++) head.append(h("th", { scope: "col" }, counted("key", blockKeys(k))));
    table.append(h("thead", {}, head));
    const body = h("tbody");
    trace.workers.forEach((w, i) => {
      const tr = h("tr", {}, h("th", { scope: "row" }, `worker ${i + 1}`));
      for (let k = 0; k < total; k++) {
        const visits = w.steps.some((s) => s.k_block === k);
        let state = "pending";
        let text = "";
        if (!visits) { state = "skipped"; text = "masked"; }
        else if (k === position - 1) { state = "current"; text = `S${sub(i + 1)},${sub(k + 1)}`; }
        else if (k < position - 1) { state = "done"; text = "done"; }
        tr.append(h("td", { class: `fd-tile fd-tile--${state}`, dataset: { state } }, text));
      }
      body.append(tr);
    });
    table.append(body);
    map.replaceChildren(scrollBox(table));
  }

  function renderWorker(w, i) {
    const k = position - 1;
    const current = w.steps.find((s) => s.k_block === k);
    const done = w.steps.filter((s) => s.k_block <= k);
    const latest = done[done.length - 1];
    const n = w.rows.length;
    const dv = trace.V[0].length;
    const rowLabels = w.rows.map((r) => `row ${r + 1}`);
    const firstKeys = w.steps.length ? Math.min(trace.block, trace.K.length - w.steps[0].k_block * trace.block) : trace.block;
    const tileCols = current ? current.S[0].length : firstKeys;
    const tileKeys = current
      ? Array.from({ length: tileCols }, (_, c) => `key ${current.k_block * trace.block + c + 1}`)
      : Array.from({ length: tileCols }, () => "key ·");
    const m = latest ? latest.m_new : w.rows.map(() => -Infinity);
    const stats = w.rows.map((_, r) => [
      current ? current.m_old[r] : null,
      current ? current.m_new[r] : m[r],
      current ? current.alpha[r] : null,
      latest ? latest.l[r] : 0,
    ]);
    let note;
    const keys = position === 0 ? [] : blockKeys(k);
    if (position === 0) note = "Starts with m = −∞, ℓ = 0, O = 0.";
    else if (!current) {
      const them = keys.length === 1 ? "it" : "all of them";
      note = `Skips ${counted("key", keys)}: the causal mask hides ${them} from ${counted("row", w.rows)}.`;
    } else if (current.m_old.every((x) => x === -Infinity)) {
      note = `${counted("Key", keys)}, its first tile: m was −∞, so α = 0 and ℓ and O start from this tile's P and P·V.`;
    } else {
      const grew = w.rows.filter((_, r) => current.alpha[r] < 1).map((r) => r + 1);
      note = grew.length
        ? `${counted("Key", keys)}: the max grew in row${grew.length > 1 ? "s" : ""} ${grew.join(", ")}, so α < 1 shrinks the old ℓ and O there before this tile's P and P·V are added.`
        : `${counted("Key", keys)}: no row found a larger score, so α = 1 and this tile's P and P·V are simply added.`;
    }

    return h("section", { class: "fd-worker", dataset: { worker: String(i) }, "aria-label": `Worker ${i + 1}` },
      h("h4", {}, `Worker ${i + 1} · query ${counted("row", w.rows)}`),
      h("p", { class: "fd-worker__note" }, note),
      h("div", { class: "fd-worker__tables" },
        scrollBox(matrixTable({
          caption: current ? `Tile S${sub(i + 1)},${sub(k + 1)} (scaled scores)` : "Score tile", rowLabels, colLabels: tileKeys, className: "fd-S", digits: DIGITS,
          values: current ? current.S : blank(n, tileCols),
          cell: (v) => placeholder(v) || (v === -Infinity ? { text: "−∞", class: "fd-masked", title: "masked" } : null),
        })),
        scrollBox(matrixTable({
          caption: "P = exp(S − m after)", rowLabels, colLabels: tileKeys, className: "fd-P", digits: DIGITS,
          values: current ? current.P : blank(n, tileCols), cell: placeholder,
        })),
        scrollBox(matrixTable({
          caption: "Running statistics", rowLabels, colLabels: ["m before", "m after", "α", "ℓ"],
          className: "fd-stats", digits: DIGITS, values: stats, cell: placeholder,
        })),
        scrollBox(matrixTable({
          caption: "O, unnormalised", rowLabels, colLabels: Array.from({ length: dv }, (_, j) => `dim ${j + 1}`),
          className: "fd-O", digits: DIGITS,
          values: latest ? latest.O : w.rows.map(() => new Array(dv).fill(0)),
        }))));
  }

  function renderResult() {
    const finished = position === total;
    const rowLabels = trace.Q.map((_, r) => `row ${r + 1}`);
    const cols = trace.V[0].map((_, j) => `dim ${j + 1}`);
    const diff = maxAbsDiff(trace.output, trace.reference);
    result.replaceChildren(
      h("div", { class: "fd-stepper__outputs" },
        scrollBox(matrixTable({
          caption: "FlashAttention: O / ℓ", rowLabels, colLabels: cols, className: "fd-final", digits: DIGITS,
          values: finished ? trace.output : blank(trace.Q.length, cols.length), cell: placeholder,
        })),
        scrollBox(matrixTable({
          caption: "Full softmax(S) · V", rowLabels, colLabels: cols, className: "fd-reference", digits: DIGITS,
          values: trace.reference,
        }))),
      h("p", { class: "fd-stepper__verdict", dataset: { maxDiff: finished ? String(diff) : "" } },
        finished
          ? diff < 1e-9
            ? `Largest difference between the two: ${diff.toExponential(1)} (float64 rounding): the same numbers.`
            : `Largest difference between the two: ${diff}: they disagree, which is a bug in this page.`
          : "After the last key block each worker divides O by ℓ; the result appears on the left."));
  }

  function render() {
    const k = position - 1;
    for (const b of [buttons.first, buttons.prev]) b.setAttribute("aria-disabled", String(position === 0));
    for (const b of [buttons.next, buttons.last]) b.setAttribute("aria-disabled", String(position === total));
    status.textContent = position === 0
      ? `Step 0 of ${total}: nothing processed yet.`
      : `Step ${position} of ${total}: key block ${k + 1} (${counted("key", blockKeys(k))})${position === total ? " — done." : "."}`;
    renderMap();
    workers.replaceChildren(...trace.workers.map(renderWorker));
    renderResult();
    root.flashdocStep = position;
  }

  return {
    element,
    show(newTrace, { keepPosition = false } = {}) {
      trace = newTrace;
      total = Math.max(1, Math.ceil(trace.K.length / trace.block));
      position = keepPosition ? Math.min(position, total) : 0;
      root.flashdocTrace = trace;
      render();
    },
  };
}

function initWorkedExample(root, view) {
  const url = root.dataset.trace ? new URL(root.dataset.trace, document.baseURI).href : siteUrl(WORKED_EXAMPLE);
  const check = h("p", { class: "fd-stepper__check", "aria-live": "polite" }, "Loading the recorded example…");
  root.replaceChildren(h("div", { class: "fd-widget__title" }, "FlashAttention, tile by tile"), check, view.element);
  fetch(url)
    .then((response) => {
      if (!response.ok) throw new Error(`${response.status} ${response.statusText} for ${url}`);
      return response.json();
    })
    .then((recorded) => {
      const trace = buildTrace({ ...recorded, causal: Boolean(recorded.causal) });
      const diff = traceDifference(trace, recorded);
      root.dataset.recordedDiff = String(diff);
      check.textContent = `N = ${recorded.Q.length}, d = ${recorded.Q[0].length}, block = ${recorded.block}, `
        + `scale = ${recorded.scale}. Every number below is computed by this page in JavaScript; the largest `
        + `difference from the Python run's recording, over every step, is ${diff === 0 ? "0" : diff.toExponential(1)}`
        + " (the recording keeps 6 decimals).";
      view.show(trace);
    })
    .catch((err) => {
      check.textContent = `Could not load the recorded example (${err.message}).`;
      console.error("tile stepper:", err);
    });
}

function initReaderExample(root, view) {
  const clampInt = (value, lo, hi, fallback) => {
    const x = Number.parseInt(value, 10);
    return Number.isFinite(x) ? Math.max(lo, Math.min(hi, x)) : fallback;
  };
  const state = {
    n: clampInt(root.dataset.n, 2, 12, 6),
    d: clampInt(root.dataset.d, 1, 6, 3),
    block: 2,
    seed: clampInt(root.dataset.seed, 0, 999999, 1),
    causal: root.dataset.causal === "true",
  };
  state.block = clampInt(root.dataset.block, 1, state.n, Math.min(2, state.n));

  const select = (label, options, value) => {
    const el = h("select", { id: uid("fd-opt") });
    for (const o of options) el.append(h("option", { value: String(o), selected: o === value }, String(o)));
    return { el, label: field(label, el) };
  };
  const ints = (lo, hi) => Array.from({ length: hi - lo + 1 }, (_, i) => lo + i);
  const nSel = select("N (tokens)", ints(2, 12), state.n);
  const dSel = select("d", ints(1, 6), state.d);
  const bSel = select("block", ints(1, state.n), state.block);
  const seedInput = h("input", { type: "number", id: uid("fd-seed"), min: "0", max: "999999", step: "1", value: String(state.seed) });
  const shuffle = h("button", { type: "button", class: "md-button" }, "New random inputs");
  const causalBox = h("input", { type: "checkbox", id: uid("fd-causal"), checked: state.causal });
  const editors = h("div", { class: "fd-explorer__inputs" });

  root.replaceChildren(
    h("div", { class: "fd-widget__title" }, "Your own example"),
    h("div", { class: "fd-controls" }, nSel.label, dSel.label, bSel.label,
      field("seed", seedInput), shuffle,
      h("label", { for: causalBox.id }, causalBox, " Causal mask")),
    h("details", { class: "fd-explorer__edit" }, h("summary", {}, "Edit Q, K and V"), editors),
    view.element);

  function randomInputs() {
    const rand = seededRandom(state.seed);
    state.Q = randomMatrix(rand, state.n, state.d);
    state.K = randomMatrix(rand, state.n, state.d);
    state.V = randomMatrix(rand, state.n, state.d);
  }

  function recompute(keepPosition) {
    view.show(buildTrace({
      Q: state.Q, K: state.K, V: state.V, scale: 1 / Math.sqrt(state.d), block: state.block, causal: state.causal,
    }), { keepPosition });
  }

  function rebuildEditors() {
    const rowLabels = state.Q.map((_, i) => `row ${i + 1}`);
    const editor = (name, key) => matrixEditor({
      name, rowLabels, values: state[key], onChange: (values) => { state[key] = values; recompute(true); },
    });
    editors.replaceChildren(scrollBox(editor("Q", "Q")), scrollBox(editor("K", "K")), scrollBox(editor("V", "V")));
  }

  function reset() {
    randomInputs();
    rebuildEditors();
    recompute(false);
  }

  nSel.el.addEventListener("change", () => {
    state.n = Number(nSel.el.value);
    state.block = Math.min(state.block, state.n);
    bSel.el.replaceChildren(...ints(1, state.n).map((o) => h("option", { value: String(o), selected: o === state.block }, String(o))));
    reset();
  });
  dSel.el.addEventListener("change", () => { state.d = Number(dSel.el.value); reset(); });
  bSel.el.addEventListener("change", () => { state.block = Number(bSel.el.value); recompute(false); });
  seedInput.addEventListener("change", () => { state.seed = clampInt(seedInput.value, 0, 999999, state.seed); reset(); });
  shuffle.addEventListener("click", () => {
    state.seed = (state.seed * 7919 + 13) % 1000000;
    seedInput.value = String(state.seed);
    reset();
  });
  causalBox.addEventListener("change", () => { state.causal = causalBox.checked; recompute(false); });
  reset();
}

onEachPage(".fd-tile-stepper", (root) => {
  const view = createView(root);
  if (root.dataset.mode === "reader") initReaderExample(root, view);
  else initWorkedExample(root, view);
});
