// Accessibility for <img-comparison-slider> (tools/hooks/image_compare.py writes the markup with
// role="slider"). The component moves smoothly while an arrow key is held; this adds what the ARIA slider
// pattern expects: a step on every key press, Home/End, and the current value announced as it changes.
const COMPARE_KEYS = { ArrowLeft: -5, ArrowDown: -5, ArrowRight: 5, ArrowUp: 5, PageDown: -25, PageUp: 25 };

function announceCompare(slider) {
  const value = Math.round(slider.value);
  const [before, after] = [...slider.querySelectorAll("figcaption")].map((c) => c.textContent);
  slider.setAttribute("aria-valuenow", value);
  slider.setAttribute("aria-valuetext", `${value}% ${before}, ${100 - value}% ${after}`);
}

document$.subscribe(({ body }) => {
  for (const slider of body.querySelectorAll("img-comparison-slider[role=slider]")) {
    if (slider.dataset.a11y) continue;
    slider.dataset.a11y = "ready";
    slider.addEventListener("slide", () => announceCompare(slider));
    slider.addEventListener("keydown", (event) => {
      let value = slider.value;
      if (event.key in COMPARE_KEYS) value += COMPARE_KEYS[event.key];
      else if (event.key === "Home") value = 0;
      else if (event.key === "End") value = 100;
      else return;
      event.preventDefault(); // keep the page from scrolling while the slider has focus
      slider.value = Math.min(100, Math.max(0, value));
      announceCompare(slider);
    });
  }
});
