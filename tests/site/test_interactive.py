"""The interactive pieces (docs/javascripts/interactive/) in headless Chromium: each loads, responds to input,
and shows the numbers Python computes for the same inputs. The tile stepper is checked against the trace that
snippets/flashattention/worked_example.py recorded, every step of both workers; the runnable cell runs on the
Pyodide the site serves, while the `page` fixture blocks every request that leaves 127.0.0.1.
"""

from __future__ import annotations

import json
import math

import pytest

from tools.outputs import ROOT, snippet

SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"  # where the `page` fixture saves its screenshots too

READY = "[data-fd-ready='true']"
DIGITS = 3

# Reads a matrix table: one row per <tr> of the body, skipping the row header; each cell's shown text and the
# full-precision value the widget put in data-value ("null" for a cell not computed yet).
READ_TABLE = "t => [...t.tBodies[0].rows].map(r => [...r.cells].slice(1).map(c => [c.textContent, c.dataset.value]))"


def shown(x: float) -> str:
    """A number as the widgets print it (common.js fmt): 3 decimals, a real minus sign, −∞, no "−0.000"."""
    if x == -math.inf:
        return "−∞"
    s = f"{x:.{DIGITS}f}"
    if float(s) == 0:
        s = s.lstrip("-")
    return s.replace("-", "−")


def read_table(locator) -> list[list[tuple[str, float | None]]]:
    rows = locator.evaluate(READ_TABLE)
    return [[(text, None if value == "null" else float(value)) for text, value in row] for row in rows]


def assert_table(locator, expected, tol=1e-12, label=""):
    """The table shows `expected`: every full-precision value within tol, every shown text as fmt would print it."""
    got = read_table(locator)
    assert len(got) == len(expected) and all(len(g) == len(e) for g, e in zip(got, expected)), (label, got, expected)
    for i, (grow, erow) in enumerate(zip(got, expected)):
        for j, ((text, value), want) in enumerate(zip(grow, erow)):
            where = f"{label}[{i}][{j}]"
            if want == -math.inf:
                assert value == -math.inf and text == "−∞", (where, text, value)
                continue
            assert value is not None and abs(value - want) <= tol, (where, value, want)
            # Shown to 3 decimals: within half a unit in the last place (the recording itself is rounded).
            assert abs(float(text.replace("−", "-")) - want) <= 0.5e-3 + tol, (where, text, want)


def python_attention(Q, K, V, scale, causal):
    """The textbook definition, in float64: the values the widgets must match."""
    S = [
        [-math.inf if causal and j > i else scale * sum(a * b for a, b in zip(q, k)) for j, k in enumerate(K)]
        for i, q in enumerate(Q)
    ]
    P = []
    for row in S:
        m = max(row)
        e = [math.exp(s - m) for s in row]
        P.append([x / sum(e) for x in e])
    O = [[sum(p * v[c] for p, v in zip(row, V)) for c in range(len(V[0]))] for row in P]
    return S, P, O


# ---------------------------------------------------------------------------------------------- explorer


def explorer_state(root):
    return root.evaluate("el => el.flashdocState")


def check_explorer(root, causal, scaled):
    state = explorer_state(root)
    assert state["causal"] is causal and state["scaled"] is scaled
    Q, K, V = state["Q"], state["K"], state["V"]
    scale = 1 / math.sqrt(len(K[0])) if scaled else 1.0
    S, P, O = python_attention(Q, K, V, scale, causal)
    assert_table(root.locator("table.fd-scores"), S, label="S")
    assert_table(root.locator("table.fd-weights"), P, label="P")
    assert_table(root.locator("table.fd-output"), O, label="O")
    return S, P, O


def test_attention_explorer_updates_live_and_matches_python(page):
    page.goto(page.site_url + "interactive/attention-explorer/")
    root = page.locator(".fd-attention-explorer" + READY)
    root.locator("table.fd-weights").wait_for()
    height = root.bounding_box()["height"]

    # The first preset is the sentence of snippets/interactive/pure_python_attention.py: same weights as it recorded.
    _, P, _ = check_explorer(root, causal=False, scaled=True)
    recorded = (snippet("interactive/pure_python_attention").output_dir / "stdout.txt").read_text().splitlines()
    start = recorded.index("Weights softmax(S): each row sums to 1") + 1
    for row, line in zip(P, recorded[start : start + 3]):
        assert [f"{p:.3f}" for p in row] == line.split(":")[1].split()

    # Editing a number recomputes everything: give "sat" (row 3) the query [-2, 0].
    root.get_by_label("Q (queries), sat, dimension 1").fill("-2")
    assert explorer_state(root)["Q"][2] == [-2.0, 0.0]
    check_explorer(root, causal=False, scaled=True)
    assert "“sat” → “The”" in root.locator(".fd-explorer__summary").inner_text()

    # The causal mask: −∞ above the diagonal, zero weight there, and the first token sees only itself.
    root.get_by_label("Causal mask").check()
    S, P, _ = check_explorer(root, causal=True, scaled=True)
    assert P[0] == [1.0, 0.0, 0.0]
    assert root.locator("table.fd-scores td.fd-masked").count() == 3
    assert root.bounding_box()["height"] == pytest.approx(height, abs=2), "the explorer jumped"

    # No scaling: raw dot products. On the "large" preset that makes every row of weights nearly one-hot.
    root.get_by_label("Causal mask").uncheck()
    root.get_by_label("Example").select_option("large")
    _, P_scaled, _ = check_explorer(root, causal=False, scaled=True)
    height = root.bounding_box()["height"]  # four tokens now: taller, and it stays so
    root.get_by_label("Scale scores by").uncheck()
    _, P_raw, _ = check_explorer(root, causal=False, scaled=False)
    assert min(max(row) for row in P_raw) > 0.98 and max(max(row) for row in P_scaled) < 0.9

    # An invalid entry is flagged and ignored rather than turned into NaN.
    field = root.get_by_label("K (keys), to, dimension 1")
    field.fill("")
    assert field.get_attribute("aria-invalid") == "true"
    assert not any(math.isnan(x) for row in explorer_state(root)["P"] for x in row)
    field.fill("1e200")  # its products would overflow to infinity, and the softmax to NaN
    assert field.get_attribute("aria-invalid") == "true"
    assert not any(math.isnan(x) for row in explorer_state(root)["P"] for x in row)
    assert "undefined" not in root.locator(".fd-explorer__summary").inner_text()
    assert root.bounding_box()["height"] == pytest.approx(height, abs=2), "the explorer jumped"

    # Identical keys: every row is uniform, so the summary names the tie rather than the first key.
    root.get_by_label("Example").select_option("same-keys")
    summary = root.locator(".fd-explorer__summary").inner_text()
    assert "“a” → “a” = “b” = “c” (0.33 each)" in summary, summary


# ---------------------------------------------------------------------------------------------- tile stepper

TRACE = snippet("flashattention/worked_example").output_dir / "trace.json"


def recorded_trace():
    def num(x):
        return [num(e) for e in x] if isinstance(x, list) else (-math.inf if x == "-inf" else x)

    raw = json.loads(TRACE.read_text())
    for w in raw["workers"]:
        w["steps"] = [{k: (v if k == "k_block" else num(v)) for k, v in s.items()} for s in w["steps"]]
    return raw


def test_tile_stepper_equals_the_recorded_python_trace_at_every_step(page):
    page.goto(page.site_url + "interactive/tile-stepper/")
    root = page.locator(".fd-tile-stepper:not([data-mode])" + READY)
    root.locator(".fd-worker").first.wait_for()
    rec = recorded_trace()
    tol = 1e-6  # trace.json keeps 6 decimals

    # What the widget computed (its whole trace, full precision) equals the recording.
    computed = root.evaluate("el => el.flashdocTrace")
    assert [w["rows"] for w in computed["workers"]] == [w["rows"] for w in rec["workers"]] == [[0, 1], [2, 3]]
    assert float(root.get_attribute("data-recorded-diff")) < tol

    total = max(s["k_block"] for w in rec["workers"] for s in w["steps"]) + 1
    status = root.locator(".fd-stepper__status")
    assert status.inner_text().startswith(f"Step 0 of {total}")
    assert root.locator(".fd-worker").count() == len(rec["workers"]) == 2
    heights = {round(root.bounding_box()["height"])}

    # Step with the keyboard: focus "Next" and press Enter, then check every table of both workers.
    root.get_by_role("button", name="Next key block").focus()
    for t in range(1, total + 1):
        page.keyboard.press("Enter")
        assert root.evaluate("el => el.flashdocStep") == t
        assert status.inner_text().startswith(f"Step {t} of {total}")
        for i, w in enumerate(rec["workers"]):
            step = next(s for s in w["steps"] if s["k_block"] == t - 1)
            card = root.locator(f".fd-worker[data-worker='{i}']")
            assert_table(card.locator("table.fd-S"), step["S"], tol, f"worker {i} step {t} S")
            assert_table(card.locator("table.fd-P"), step["P"], tol, f"worker {i} step {t} P")
            stats = [list(r) for r in zip(step["m_old"], step["m_new"], step["alpha"], step["l"])]
            assert_table(card.locator("table.fd-stats"), stats, tol, f"worker {i} step {t} m/α/ℓ")
            assert_table(card.locator("table.fd-O"), step["O"], tol, f"worker {i} step {t} O")
        heights.add(round(root.bounding_box()["height"]))

    # After the last key block: O / ℓ, stacked, is the recorded output and the full softmax.
    assert_table(root.locator("table.fd-final"), rec["output"], tol, "O / l")
    Q, K, V = rec["Q"], rec["K"], rec["V"]
    _, _, O = python_attention(Q, K, V, rec["scale"], causal=False)
    assert_table(root.locator("table.fd-reference"), O, 1e-12, "full softmax")
    assert float(root.locator(".fd-stepper__verdict").get_attribute("data-max-diff")) < 1e-12
    assert len(heights) == 1, f"the stepper changed height while stepping: {heights}"

    # Back to the start: the initial state (m = −∞, ℓ = 0, O = 0) and nothing final shown yet.
    root.get_by_role("button", name="First step").click()
    card = root.locator(".fd-worker[data-worker='0']")
    assert [r[1] for r in read_table(card.locator("table.fd-stats"))] == [("−∞", -math.inf)] * 2
    assert all(v is None for row in read_table(root.locator("table.fd-final")) for _, v in row)


def test_reader_sized_example_ends_at_the_full_softmax(page):
    page.goto(page.site_url + "interactive/tile-stepper/")
    root = page.locator(".fd-tile-stepper[data-mode='reader']" + READY)
    root.locator(".fd-worker").first.wait_for()

    # A block size that does not divide N, and the causal mask: ragged tiles and skipped ones.
    root.get_by_label("N (tokens)").select_option("7")
    root.get_by_label("d", exact=True).select_option("3")
    root.get_by_label("block", exact=True).select_option("3")
    root.get_by_label("Causal mask").check()
    assert root.locator(".fd-worker").count() == 3  # rows 1–3, 4–6, 7
    assert root.locator("td.fd-tile--skipped").count() == 3  # worker 1 skips key blocks 2, 3; worker 2 block 3

    def check_final():
        trace = root.evaluate("el => el.flashdocTrace")
        Q, K, V = trace["Q"], trace["K"], trace["V"]
        assert (len(Q), len(Q[0]), trace["block"]) == (7, 3, 3)
        last = root.get_by_role("button", name="Last step")
        if last.get_attribute("aria-disabled") != "true":  # an edit keeps the current step
            last.click()
        assert root.evaluate("el => el.flashdocStep") == 3
        _, _, O = python_attention(Q, K, V, 1 / math.sqrt(3), causal=True)
        assert_table(root.locator("table.fd-final"), O, 1e-12, "O / l")
        assert_table(root.locator("table.fd-reference"), O, 1e-12, "full softmax")
        return O

    first = check_final()

    # The last key block holds one key, and worker 3 one row: the labels say "key 7" and "row 7", not "7–7".
    assert root.locator(".fd-stepper__status").inner_text() == "Step 3 of 3: key block 3 (key 7) — done."
    assert root.locator("table.fd-tilemap thead th").all_inner_texts() == ["keys 1–3", "keys 4–6", "key 7"]
    workers = root.locator(".fd-worker")
    assert workers.locator("h4").all_inner_texts() == [
        "Worker 1 · query rows 1–3",
        "Worker 2 · query rows 4–6",
        "Worker 3 · query row 7",
    ]
    notes = workers.locator(".fd-worker__note")
    assert notes.nth(0).inner_text() == "Skips key 7: the causal mask hides it from rows 1–3."
    assert notes.nth(2).inner_text().startswith("Key 7: ")
    root.get_by_role("button", name="Previous key block").click()
    assert root.locator(".fd-stepper__status").inner_text() == "Step 2 of 3: key block 2 (keys 4–6)."
    assert notes.nth(0).inner_text() == "Skips keys 4–6: the causal mask hides all of them from rows 1–3."
    assert notes.nth(1).inner_text().startswith("Keys 4–6: ")
    assert "7–7" not in root.inner_text()

    # New random inputs, then a hand-edited one: still the full softmax.
    root.get_by_role("button", name="New random inputs").click()
    second = check_final()
    assert second != first
    root.locator("summary", has_text="Edit Q, K and V").click()
    root.get_by_label("V, row 7, dimension 2").fill("5")
    assert root.evaluate("el => el.flashdocTrace")["V"][6][1] == 5.0
    third = check_final()
    assert third[6] != second[6]


@pytest.mark.parametrize("width", [1280, 390])
def test_back_to_top_and_the_stepper_bar_do_not_hide_each_other(page, width):
    page.set_viewport_size({"width": width, "height": 844})
    page.goto(page.site_url + "interactive/tile-stepper/")
    root = page.locator(".fd-tile-stepper:not([data-mode])" + READY)
    root.locator(".fd-worker").first.wait_for()
    # Scroll into the stepper, so its button bar sticks under the header, then up a little: material then
    # shows its "Back to top" pill (navigation.top) in the band under the header.
    page.mouse.move(width / 2, 400)
    page.evaluate("y => window.scrollTo(0, y)", root.bounding_box()["y"] + 500)
    for _ in range(3):
        page.mouse.wheel(0, -60)
        page.wait_for_timeout(100)
    page.locator(".md-top:not([hidden])").wait_for()
    # The bar moves below the pill (a 125 ms transition): wait until they no longer overlap, then check both.
    page.wait_for_function(
        """() => {
          const pill = document.querySelector(".md-top").getBoundingClientRect();
          const bar = document.querySelector(".fd-stepper__bar").getBoundingClientRect();
          return pill.bottom <= bar.top || bar.bottom <= pill.top || pill.right <= bar.left || bar.right <= pill.left;
        }""",
        timeout=3_000,
    )
    header = page.locator(".md-header").bounding_box()
    bar = root.locator(".fd-stepper__bar").bounding_box()
    assert bar["y"] >= header["y"] + header["height"] - 1 and bar["y"] < 200, bar  # stuck, near the top
    for name in ["First step", "Previous key block", "Next key block", "Last step"]:
        button = root.get_by_role("button", name=name)
        box = button.bounding_box()
        centre = page.evaluate(
            "([x, y]) => document.elementFromPoint(x, y).closest('button')?.getAttribute('aria-label')",
            [box["x"] + box["width"] / 2, box["y"] + box["height"] / 2],
        )
        assert centre == name, f"{name} is covered at {width} px"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"stepper-back-to-top-{width}.png"))


# ---------------------------------------------------------------------------------------------- runnable cells


@pytest.mark.timeout(240)
def test_runnable_cell_runs_offline_on_the_sites_pyodide(page):
    served = []
    page.context.on("request", lambda req: "assets/vendor/pyodide/" in req.url and served.append(req.url))
    page.goto(page.site_url + "interactive/run-python/")
    cell = page.locator(".fd-runnable" + READY).first
    output = cell.locator(".fd-runnable__output")
    output.wait_for()
    assert not served, "Pyodide must load on the first Run, not with the page"
    height = output.bounding_box()["height"]

    # First run: Pyodide loads from the site (10–30 s on a small CI machine), then the snippet runs.
    cell.get_by_role("button", name="Run").click()
    page.locator(".fd-runnable[data-state='ok']").first.wait_for(timeout=180_000)
    recorded = (snippet("interactive/pure_python_attention").output_dir / "stdout.txt").read_text()
    assert output.inner_text().strip() == recorded.strip()
    assert "Same output as the recorded run" in cell.locator(".fd-runnable__status").inner_text()
    assert output.bounding_box()["height"] == pytest.approx(height, abs=2), "output space was not reserved"
    assert any(u.endswith("pyodide.asm.wasm") for u in served), served

    # Every other cell on the page prints, under Pyodide, exactly what CPython recorded.
    cells = page.locator(".fd-runnable" + READY)
    for n in range(1, cells.count()):
        other = cells.nth(n)
        name = other.get_attribute("data-filename").removeprefix("snippets/").removesuffix(".py")
        other.get_by_role("button", name="Run").click()
        page.wait_for_function("el => el.dataset.state === 'ok'", arg=other.element_handle(), timeout=30_000)
        expected = (snippet(name).output_dir / "stdout.txt").read_text()
        assert other.locator(".fd-runnable__output").inner_text().strip() == expected.strip(), name
        assert "Same output as the recorded run" in other.locator(".fd-runnable__status").inner_text()

    # Edited code that fails: the traceback starts at the reader's line, not inside the runner.
    cell.get_by_role("button", name="Edit").click()
    assert not cell.get_by_role("button", name="Edit").is_visible(), "Edit stays shown while the editor is open"
    editor = cell.get_by_label("Python code of snippets/interactive/pure_python_attention.py")
    editor.fill("def divide(a, b):\n    return a / b\n\nprint('before')\nprint(divide(1, 0))\n")
    editor.press("Control+Enter")
    page.locator(".fd-runnable[data-state='error']").first.wait_for(timeout=30_000)
    text = output.inner_text()
    assert text.startswith("before") and "ZeroDivisionError: division by zero" in text
    # As CPython prints it: under each frame's "File ..., line N", that line of the reader's code.
    lines = text.splitlines()
    frames = [i for i, line in enumerate(lines) if line.startswith("  File ")]
    assert [lines[i] for i in frames] == [
        '  File "snippets/interactive/pure_python_attention.py", line 5, in <module>',
        '  File "snippets/interactive/pure_python_attention.py", line 2, in divide',
    ], text
    assert [lines[i + 1] for i in frames] == ["    print(divide(1, 0))", "    return a / b"], text
    assert "_flashdoc_run" not in text and "pyodide" not in text
    assert "ZeroDivisionError" in cell.locator(".fd-runnable__status").inner_text()

    # numpy is not in the core runtime: a clear message instead of a failed download.
    editor.fill("import numpy as np\nprint(np.ones(3))\n")
    cell.get_by_role("button", name="Run").click()
    page.wait_for_function(
        "el => el.dataset.state === 'error' && el.textContent.includes('numpy')", arg=output.element_handle()
    )
    assert "this site makes no requests to other hosts" in output.inner_text()
    # The reader is online; the reason is that numpy is not in the Python this page ships.
    assert cell.locator(".fd-runnable__status").inner_text() == "Not run: numpy is not part of the Python in this page."

    # Reset: the original, highlighted code and an empty output again.
    cell.get_by_role("button", name="Reset").click()
    assert cell.locator(".highlight").first.is_visible() and not editor.is_visible()
    assert cell.get_attribute("data-state") == "idle"


# ---------------------------------------------------------------------------------------------- phone


def test_widgets_fit_a_phone_screen(page):
    page.set_viewport_size({"width": 390, "height": 844})
    for path, selector in [
        ("interactive/attention-explorer/", ".fd-attention-explorer"),
        ("interactive/tile-stepper/", ".fd-tile-stepper"),
        ("interactive/run-python/", ".fd-runnable"),
    ]:
        page.goto(page.site_url + path)
        page.locator(selector + READY).first.wait_for()
        # Wide tables and code scroll inside their own boxes; the page itself never scrolls sideways.
        assert page.evaluate("document.documentElement.scrollWidth") <= 390, path
        for i, box in enumerate(page.locator(selector).all()):
            assert box.bounding_box()["width"] <= 390
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            box.screenshot(path=str(SCREENSHOTS / f"phone-{selector[4:]}-{i}.png"))
    # The stepper's buttons stick under the header as the reader scrolls: one row of them, not two.
    page.goto(page.site_url + "interactive/tile-stepper/")
    page.locator(".fd-tile-stepper" + READY).first.wait_for()
    tops = {round(b.bounding_box()["y"]) for b in page.locator(".fd-stepper__nav").first.locator("button").all()}
    assert len(tops) == 1, f"the stepper's buttons wrap onto {len(tops)} rows at 390 px"
