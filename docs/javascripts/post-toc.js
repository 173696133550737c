// A blog post's table of contents lives in the right-hand sidebar, which the theme hides below 60em; there the
// menu drawer shows only the blog's archive and categories, so a phone reader could not jump within a post (the
// theme's blog plugin has no place for it). On a post, a copy of the contents goes into the drawer, shown only
// where the right-hand sidebar is hidden (.fd-post-toc in stylesheets/flashdoc.css).
document$.subscribe(() => {
  if (!document.querySelector(".md-sidebar--post")) return;
  // the drawer's open level on a post: the blog's section (its archive and categories)
  const levels = document.querySelectorAll(".md-nav--primary .md-nav__item--active > .md-nav > .md-nav__list");
  const level = levels[levels.length - 1];
  const contents = document.querySelector(".md-sidebar--secondary .md-nav--secondary > .md-nav__list");
  if (!level || !contents || level.querySelector(".fd-post-toc")) return;
  const title = document.createElement("li");
  title.className = "md-nav__item fd-post-toc fd-post-toc__title";
  title.textContent = "Contents of this post";
  const entries = [...contents.querySelectorAll("a.md-nav__link")].map((link) => {
    // one flat list, subsections indented: nested lists inside the drawer would open as panels of their own
    let depth = 0;
    for (let list = link.closest("ul"); list && list !== contents; list = list.parentElement.closest("ul")) depth++;
    const item = document.createElement("li");
    item.className = "md-nav__item fd-post-toc";
    const copy = link.cloneNode(true);
    copy.style.paddingInlineStart = `${0.8 * (depth + 1)}rem`; // the drawer's own links start at 0.8rem
    item.append(copy);
    return item;
  });
  level.append(title, ...entries);
  // Following a link closes the drawer, as the theme's own navigation does.
  for (const entry of entries) {
    entry.addEventListener("click", () => {
      const toggle = document.getElementById("__drawer");
      if (toggle) toggle.checked = false;
    });
  }
});
