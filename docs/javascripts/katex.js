// Typeset math with KaTeX (served from assets/vendor/katex/). `document$` is mkdocs-material's page
// observable: it fires on every page load, including instant navigation, so new content gets typeset too.
document$.subscribe(({ body }) => {
  // pymdownx.arithmatex (generic mode) wraps each formula with its delimiters: \( \) inline, \[ \] display.
  for (const el of body.querySelectorAll(".arithmatex:not(.katex-done)")) {
    const tex = el.textContent.trim().slice(2, -2);
    try {
      katex.render(tex, el, { displayMode: el.tagName === "DIV", throwOnError: true });
      el.classList.add("katex-done");
    } catch (error) {
      // An error in the console fails the browser tests, so a typo in a formula cannot ship unnoticed.
      console.error(`KaTeX could not typeset ${JSON.stringify(tex)}: ${error.message}`);
    }
  }
  // Notebook pages (mkdocs-jupyter) keep the $…$ of their markdown cells as text.
  for (const cell of body.querySelectorAll(".jupyter-wrapper .jp-RenderedMarkdown")) {
    renderMathInElement(cell, {
      delimiters: [
        { left: "$$", right: "$$", display: true },
        { left: "$", right: "$", display: false },
        { left: "\\(", right: "\\)", display: false },
        { left: "\\[", right: "\\]", display: true },
      ],
      throwOnError: false,
      errorCallback: (message, error) => console.error(message, error),
    });
  }
});
