// Runnable cells: the {{ runnable("topic/name") }} macro wraps a snippet's code block in
// <div class="fd-runnable" data-filename="snippets/topic/name.py">; this turns it into a cell with
// Run / Edit / Reset buttons. Python runs in a Web Worker (python-worker.js) on Pyodide's core runtime,
// which is served by this site and loaded on the first Run, never before.

import { h, onEachPage, pyodideIndexUrl, uid } from "./common.js";

const WORKER_URL = new URL("./python-worker.js", import.meta.url);

// One worker for the page, shared by its cells; started on the first Run. Stop terminates it, so the next
// Run starts a fresh one (the browser cache makes that reload quick).
let worker = null;
const cells = new Map(); // run id -> the cell's message handler
let nextRunId = 0;

function getWorker() {
  if (!worker) {
    worker = new Worker(WORKER_URL, { type: "module" });
    worker.onmessage = (event) => cells.get(event.data.id)?.(event.data);
    worker.onerror = (event) => {
      event.preventDefault();
      for (const handler of cells.values()) handler({ type: "crashed", text: event.message || "the Python worker failed" });
      stopWorker();
    };
  }
  return worker;
}

function stopWorker() {
  worker?.terminate();
  worker = null;
  for (const handler of cells.values()) handler({ type: "stopped" });
  cells.clear();
}

function missingModulesMessage(names) {
  const list = names.join(", ");
  const numpy = names.includes("numpy")
    ? " numpy is not part of it: loading it would mean downloading it from another site, and this site makes no requests to other hosts."
    : "";
  return `This code imports ${list}, which is not available here. The Python in this page is Pyodide's core `
    + `runtime, served by this site: the standard library only.${numpy} Write it with lists and the math module, as `
    + "the examples here are, or download the file and run it with python on your machine.";
}

function initCell(root) {
  const highlight = root.querySelector(".highlight");
  const codeEl = highlight?.querySelector("pre > code");
  if (!codeEl) throw new Error("a runnable cell needs a code block inside it");
  const original = codeEl.textContent.replace(/\n$/, "");
  const filename = root.dataset.filename || "cell.py";
  const recordedEl = root.querySelector(".fd-runnable__recorded pre code");
  const recorded = recordedEl ? recordedEl.textContent : null;
  const lines = Number.parseInt(root.dataset.outputLines || "4", 10);

  const editorId = uid("fd-editor");
  const helpId = uid("fd-editor-help");
  const editor = h("textarea", {
    id: editorId,
    class: "fd-runnable__editor",
    spellcheck: "false",
    autocapitalize: "off",
    autocomplete: "off",
    "aria-label": `Python code of ${filename}`,
    "aria-describedby": helpId,
    hidden: true,
  });
  // A final newline, so typing at the end starts a new line rather than extending the last one.
  editor.value = `${original}\n`;
  const help = h("p", { id: helpId, class: "fd-runnable__help", hidden: true },
    "Ctrl+Enter (⌘+Enter) runs. Tab indents; press Esc, then Tab, to move on.");

  const runButton = h("button", { type: "button", class: "md-button md-button--primary fd-runnable__run" }, "▶ Run");
  const editButton = h("button", { type: "button", class: "md-button", "aria-controls": editorId, "aria-expanded": "false" }, "Edit");
  const resetButton = h("button", { type: "button", class: "md-button" }, "Reset");
  const status = h("span", { class: "fd-runnable__status", role: "status", "aria-live": "polite" },
    "Runs in your browser; Python loads on the first Run.");
  const output = h("pre", { class: "fd-runnable__output", tabindex: "0", "aria-label": `Output of ${filename}`, dataset: { state: "idle" } });
  output.style.setProperty("--fd-lines", String(Math.max(3, Math.min(lines, 24))));
  output.append(h("span", { class: "fd-runnable__placeholder" }, "Press Run to see this code's output here."));

  const toolbar = h("div", { class: "fd-runnable__toolbar" }, runButton, editButton, resetButton, status);
  highlight.after(editor, help);
  // The controls go under the download link, so the code block and its source stay together.
  const caption = help.nextElementSibling?.matches(".snippet-source") ? help.nextElementSibling : help;
  caption.after(toolbar, output);

  let runId = null;
  let ranCode = original;
  let escaped = false;
  let timer = null;

  function setEditing(on) {
    if (on) editor.style.height = `${Math.max(highlight.offsetHeight, 80)}px`;
    editor.hidden = !on;
    help.hidden = !on;
    highlight.hidden = on;
    editButton.setAttribute("aria-expanded", String(on));
    editButton.hidden = on; // Reset is the way back to the original code
    root.dataset.editing = String(on);
  }

  function grow() {
    editor.style.height = "auto";
    editor.style.height = `${editor.scrollHeight + 2}px`;
  }

  function finish(message, state) {
    clearInterval(timer);
    timer = null;
    cells.delete(runId);
    runId = null;
    runButton.textContent = "▶ Run";
    output.dataset.state = state;
    root.dataset.state = state;
    status.textContent = message;
  }

  function append(text, className) {
    output.querySelector(".fd-runnable__placeholder")?.remove();
    const last = output.lastChild;
    if (last && last.className === className) last.textContent += text;
    else output.append(h("span", { class: className }, text));
  }

  function onMessage(msg) {
    if (msg.type === "status" && msg.text === "loading") {
      const started = performance.now();
      const tick = () => {
        status.textContent = `Loading Python (first run only)… ${Math.round((performance.now() - started) / 1000)} s`;
      };
      tick();
      timer = setInterval(tick, 1000);
    } else if (msg.type === "status" && msg.text === "running") {
      clearInterval(timer);
      status.textContent = "Running…";
    } else if (msg.type === "stdout") {
      append(msg.text, "fd-out");
    } else if (msg.type === "stderr") {
      append(msg.text, "fd-err");
    } else if (msg.type === "done") {
      if (msg.missing) {
        append(missingModulesMessage(msg.missing), "fd-note");
        const verb = msg.missing.length === 1 ? "is" : "are";
        finish(`Not run: ${msg.missing.join(", ")} ${verb} not part of the Python in this page.`, "error");
        return;
      }
      const printed = [...output.querySelectorAll(".fd-out")].map((s) => s.textContent).join("");
      let verdict = "";
      // Compared only when the code is the file's: edited code is expected to print something else.
      if (msg.ok && recorded !== null && ranCode.trimEnd() === original.trimEnd()) {
        verdict = printed.trimEnd() === recorded.trimEnd()
          ? " Same output as the recorded run."
          : " The output differs from the recorded run.";
      }
      if (msg.ok) {
        finish(`Finished in ${msg.seconds < 1 ? `${Math.round(msg.seconds * 1000)} ms` : `${msg.seconds.toFixed(1)} s`}.${verdict}`, "ok");
      } else {
        const errors = [...output.querySelectorAll(".fd-err")].map((s) => s.textContent).join("").trim().split("\n");
        finish(`Error: ${errors[errors.length - 1] || "the code failed"}`, "error");
      }
    } else if (msg.type === "stopped") {
      append("\n[stopped]\n", "fd-note");
      finish("Stopped.", "stopped");
    } else if (msg.type === "crashed") {
      append(`${msg.text}\n`, "fd-err");
      finish("Python stopped unexpectedly.", "error");
    }
  }

  function run() {
    if (runId !== null) {
      stopWorker(); // this cell's Run button reads "Stop" while it runs
      return;
    }
    output.replaceChildren();
    output.dataset.state = "running";
    root.dataset.state = "running";
    runButton.textContent = "■ Stop";
    status.textContent = "Starting…";
    nextRunId += 1;
    runId = nextRunId;
    cells.set(runId, onMessage);
    ranCode = editor.value;
    getWorker().postMessage({ type: "run", id: runId, code: ranCode, filename, indexURL: pyodideIndexUrl() });
  }

  runButton.addEventListener("click", run);
  editButton.addEventListener("click", () => {
    setEditing(true);
    grow();
    editor.focus();
  });
  resetButton.addEventListener("click", () => {
    if (runId !== null) stopWorker();
    editor.value = `${original}\n`;
    setEditing(false);
    output.replaceChildren(h("span", { class: "fd-runnable__placeholder" }, "Press Run to see this code's output here."));
    output.dataset.state = "idle";
    root.dataset.state = "idle";
    status.textContent = "Reset to the original code.";
  });
  editor.addEventListener("input", grow);
  editor.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      if (runId === null) run();
      return;
    }
    if (event.key === "Escape") { escaped = true; return; }
    if (event.key === "Tab" && !escaped && !event.shiftKey) {
      event.preventDefault();
      editor.setRangeText("    ", editor.selectionStart, editor.selectionEnd, "end");
      grow();
      return;
    }
    escaped = false;
  });
}

onEachPage(".fd-runnable", initCell);
