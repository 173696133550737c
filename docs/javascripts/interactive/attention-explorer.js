// Attention explorer: <div class="fd-attention-explorer"></div>
//
// The reader picks a preset or edits Q, K and V, and sees the scores, the softmax weights (as a heatmap)
// and the output, recomputed on every keystroke. Optional attributes:
//   data-preset="cat" | "large" | "same-keys"   the example shown first (default "cat")
//   data-causal="true"                           start with the causal mask on
//   data-scale="false"                           start without the 1/√d_k scaling
// After each update the element exposes the numbers it shows as `element.flashdocState`
// ({Q, K, V, causal, scaled, scale, S, P, O}) for tests and curious readers' consoles.

import { attention } from "./attention-math.js";
import { field, fmt, h, matrixEditor, matrixTable, onEachPage, scrollBox, uid } from "./common.js";

export const PRESETS = {
  cat: {
    label: "The cat sat",
    note: "“sat” asks for a noun (its query points along dimension 1), and the key of “cat” points that way.",
    tokens: ["The", "cat", "sat"],
    Q: [[0.0, 2.0], [0.5, 1.5], [2.0, 0.0]],
    K: [[0.0, 1.0], [1.0, 0.0], [0.5, 0.5]],
    V: [[0.1, 0.0], [1.0, 0.2], [0.2, 1.0]],
  },
  large: {
    label: "Large dot products (dₖ = 4)",
    note: "Each query matches one key far better than the rest. Unscaled, the weights are nearly one-hot; scaling by 1/√4 halves the gaps and lets the other keys back in.",
    tokens: ["to", "be", "or", "not"],
    Q: [[-1.0, -1.5, 1.5, -1.0], [-1.0, 0.5, -2.0, -0.5], [-0.5, -1.0, 0.0, 2.0], [0.0, 1.0, 1.0, 0.5]],
    K: [[1.5, -2.0, 1.5, -1.0], [0.5, 1.5, 1.5, 1.5], [2.0, 0.0, -2.0, -0.5], [1.0, -2.0, 0.0, 2.0]],
    V: [[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]],
  },
  "same-keys": {
    label: "Identical keys",
    note: "Every key is the same, so every score in a row ties: the weights are uniform and the output is the mean of the values.",
    tokens: ["a", "b", "c"],
    Q: [[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]],
    K: [[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]],
    V: [[3.0, 0.0], [0.0, 3.0], [0.0, 0.0]],
  },
};

function heatStyle(w) {
  // The weight sets how much of the accent colour shows; dark text on light cells, light on dark.
  const pct = Math.round(w * 100);
  return `--fd-heat: ${pct}%;` + (w > 0.55 ? " color: var(--fd-heat-ink-strong);" : "");
}

function initExplorer(root) {
  const presetId = PRESETS[root.dataset.preset] ? root.dataset.preset : "cat";
  const state = {
    preset: presetId,
    causal: root.dataset.causal === "true",
    scaled: root.dataset.scale !== "false",
    ...structuredClone(PRESETS[presetId]),
  };

  const select = h("select", { id: uid("fd-preset") });
  for (const [id, preset] of Object.entries(PRESETS)) {
    select.append(h("option", { value: id, selected: id === presetId }, preset.label));
  }
  const causalBox = h("input", { type: "checkbox", id: uid("fd-causal"), checked: state.causal });
  const scaleBox = h("input", { type: "checkbox", id: uid("fd-scale"), checked: state.scaled });
  const scaleText = h("span", { class: "fd-muted" });
  const note = h("p", { class: "fd-explorer__note" });

  const controls = h("div", { class: "fd-controls" },
    field("Example", select),
    h("label", { for: causalBox.id }, causalBox, " Causal mask"),
    h("label", { for: scaleBox.id }, scaleBox, " Scale scores by 1/√d", h("sub", {}, "k"), " ", scaleText));

  const inputs = h("div", { class: "fd-explorer__inputs" });
  const results = h("div", { class: "fd-explorer__results" });
  const summary = h("p", { class: "fd-explorer__summary", "aria-live": "polite" });

  root.replaceChildren(
    h("div", { class: "fd-widget__title" }, "Attention explorer"),
    controls, note,
    h("p", { class: "fd-explorer__label" }, "Queries, keys and values — edit any number:"), inputs,
    results, summary);

  function buildInputs() {
    const editor = (name, key) => matrixEditor({
      name, rowLabels: state.tokens, values: state[key],
      onChange: (values) => { state[key] = values; update(); },
    });
    inputs.replaceChildren(
      scrollBox(editor("Q (queries)", "Q")), scrollBox(editor("K (keys)", "K")), scrollBox(editor("V (values)", "V")));
  }

  function update() {
    const dk = state.K[0].length;
    const scale = state.scaled ? 1 / Math.sqrt(dk) : 1;
    const { S, P, O } = attention(state.Q, state.K, state.V, { scale, causal: state.causal });
    scaleText.textContent = state.scaled ? `(dₖ = ${dk}: × ${fmt(scale, 3)})` : `(off: × 1)`;
    note.textContent = PRESETS[state.preset].note;
    const keyLabels = state.tokens.map((t) => `key “${t}”`);
    const queryLabels = state.tokens.map((t) => `“${t}”`);
    results.replaceChildren(
      scrollBox(matrixTable({
        caption: state.scaled ? "Scores S = QKᵀ / √dₖ" : "Scores S = QKᵀ (unscaled)",
        rowLabels: queryLabels, colLabels: keyLabels, values: S, className: "fd-scores",
        cell: (v) => (v === -Infinity ? { text: "−∞", title: "masked: a query may not look at later keys", class: "fd-masked" } : null),
      })),
      scrollBox(matrixTable({
        caption: "Weights softmax(S), one row per query",
        rowLabels: queryLabels, colLabels: keyLabels, values: P, className: "fd-weights fd-heatmap",
        cell: (v) => ({ style: heatStyle(v) }),
      })),
      scrollBox(matrixTable({
        caption: "Output = weights · V",
        rowLabels: queryLabels, colLabels: state.V[0].map((_, j) => `dim ${j + 1}`), values: O, className: "fd-output",
      })));
    const focus = P.map((row, i) => {
      // keys whose weight equals the row's largest (to rounding): a tie names them all, not the first
      const top = Math.max(...row);
      const keys = row.flatMap((w, j) => (top - w <= 1e-9 * top ? [`“${state.tokens[j]}”`] : []));
      const each = keys.length > 1 ? " each" : "";
      return `“${state.tokens[i]}” → ${keys.join(" = ")} (${fmt(top, 2)}${each})`;
    });
    summary.textContent = `Strongest weight per query: ${focus.join(", ")}.`;
    root.flashdocState = {
      Q: state.Q, K: state.K, V: state.V, causal: state.causal, scaled: state.scaled, scale, S, P, O,
    };
  }

  select.addEventListener("change", () => {
    Object.assign(state, structuredClone(PRESETS[select.value]), { preset: select.value });
    buildInputs();
    update();
  });
  causalBox.addEventListener("change", () => { state.causal = causalBox.checked; update(); });
  scaleBox.addEventListener("change", () => { state.scaled = scaleBox.checked; update(); });

  buildInputs();
  update();
}

onEachPage(".fd-attention-explorer", initExplorer);
