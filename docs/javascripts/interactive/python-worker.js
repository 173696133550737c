// Runs Python for the runnable cells, off the main thread so a long or endless loop never freezes the page
// (the page can always stop it by terminating this worker). Pyodide's core runtime is imported from the
// site itself: the page passes its URL in, nothing is fetched from any other host.
//
// Messages in:  {type: "run", id, code, filename, indexURL}
// Messages out: {type: "status", id, text: "loading"|"running"} · {type: "stdout"|"stderr", id, text}
//               {type: "done", id, ok, seconds, missing?: [module names]}

let pyodideReady = null;
// The cell whose code is running: Python runs synchronously, so output between two runs belongs to one cell.
let runningId = null;

const post = (type, id, fields) => self.postMessage({ type, id, ...fields });

// Compiles and runs a cell as `python file.py` would (as __main__, in a fresh namespace), and prints a
// traceback that starts at the reader's code rather than inside this runner. Returns True on success.
const RUNNER = `
import importlib.util, linecache, sys, traceback
from pyodide.code import find_imports

def _flashdoc_missing_modules(source):
    try:
        names = find_imports(source)
    except SyntaxError:
        return []
    return sorted({n for n in names if importlib.util.find_spec(n) is None})

def _flashdoc_run(source, filename):
    namespace = {"__name__": "__main__", "__file__": filename}
    # No file by that name exists here, so hand linecache the source: a traceback then shows each failing
    # line under its "File ..., line N", as CPython does (mtime None: checkcache leaves the entry alone).
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    try:
        exec(compile(source, filename, "exec"), namespace)
    except SystemExit as exc:
        if exc.code not in (None, 0):
            sys.stderr.write(f"SystemExit: {exc.code}\\n")
            return False
    except BaseException as exc:
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != filename:
            tb = tb.tb_next
        sys.stderr.write("".join(traceback.format_exception(type(exc), exc, tb)))
        return False
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    return True
`;

async function load(indexURL) {
  const { loadPyodide } = await import(`${indexURL}pyodide.mjs`);
  const pyodide = await loadPyodide({ indexURL });
  // Raw writes, forwarded as they happen: exact text (print(..., end="") included) and live progress.
  for (const [stream, setter] of [["stdout", "setStdout"], ["stderr", "setStderr"]]) {
    const decoder = new TextDecoder();
    pyodide[setter]({
      write: (bytes) => {
        post(stream, runningId, { text: decoder.decode(bytes, { stream: true }) });
        return bytes.length;
      },
    });
  }
  pyodide.runPython(RUNNER);
  const findMissing = pyodide.globals.get("_flashdoc_missing_modules");
  return {
    run: pyodide.globals.get("_flashdoc_run"),
    missingModules: (code) => {
      const list = findMissing(code);
      try { return list.toJs(); } finally { list.destroy(); }
    },
  };
}

self.onmessage = async (event) => {
  const { type, id, code, filename, indexURL } = event.data;
  if (type !== "run") return;
  try {
    if (!pyodideReady) {
      post("status", id, { text: "loading" });
      pyodideReady = load(indexURL);
    }
    const python = await pyodideReady;
    const missing = python.missingModules(code);
    if (missing.length) {
      post("done", id, { ok: false, seconds: 0, missing });
      return;
    }
    post("status", id, { text: "running" });
    runningId = id;
    const start = performance.now();
    const ok = python.run(code, filename);
    post("done", id, { ok, seconds: (performance.now() - start) / 1000 });
  } catch (err) {
    pyodideReady = null;
    post("stderr", id, { text: `Python could not start here: ${err.message}\n` });
    post("done", id, { ok: false, seconds: 0 });
  } finally {
    runningId = null;
  }
};
