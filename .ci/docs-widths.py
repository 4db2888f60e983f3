"""The built documentation site in a 1280-px-wide window: no page scrolls sideways.

Usage: ``python .ci/docs-widths.py BUILD_DIR SCREENSHOT_DIR`` (``.ci/docs``
runs it after the build).

Opens every HTML page of the site in headless Chromium (Debian's
``/usr/bin/chromium``, driven by Playwright) at a 1280 x 900 window and
fails when a page is wider than the window
(``document.documentElement.scrollWidth`` > its ``clientWidth``) or when an
element on it scrolls sideways: a code block, table or signature wider than
its box (``scrollWidth`` > ``clientWidth`` where ``overflow-x`` is ``auto``
or ``scroll``), which the page's own width does not show. Prints the widths
of each page and the elements that overflow; saves what the window shows of
the home page, one API page and "Adding an operator" as PNGs in
SCREENSHOT_DIR.
"""

from __future__ import annotations

import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

WIDTH, HEIGHT = 1280, 900
CHROMIUM = "/usr/bin/chromium"
# The machine's network is closed: no background connections, no updates.
FLAGS = ["--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]
SCREENSHOTS = {
    "index.html": "home.png",
    "_autosummary/jax_aclnn.smooth_l1_loss.html": "api-smooth_l1_loss.png",
    "adding-an-operator.html": "adding-an-operator.png",
}
MEASURE = """() => {
  const page = document.documentElement;
  const wide = [];
  for (const e of document.body.querySelectorAll("*")) {
    const overflow = getComputedStyle(e).overflowX;
    if ((overflow === "auto" || overflow === "scroll") && e.clientWidth > 0
        && e.scrollWidth > e.clientWidth + 1) {
      wide.push(`<${e.tagName.toLowerCase()} class="${e.className}"> ${e.scrollWidth} px `
                + `in ${e.clientWidth}: ${(e.textContent || "").trim().slice(0, 60)}`);
    }
  }
  return {scroll: page.scrollWidth, client: page.clientWidth, inner: window.innerWidth, wide};
}"""


def main(build: Path, shots: Path) -> int:
    pages = sorted(p.relative_to(build).as_posix() for p in build.rglob("*.html")
                   if not p.relative_to(build).parts[0].startswith("_static"))
    missing = sorted(set(SCREENSHOTS) - set(pages))
    if missing:
        print(f"docs-widths: pages to screenshot not in the site: {missing}", file=sys.stderr)
        return 1
    shots.mkdir(parents=True, exist_ok=True)
    failures = 0
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
        print(f"{'page':<55} scrollWidth clientWidth innerWidth")
        for name in pages:
            page.goto((build / name).resolve().as_uri(), wait_until="load")
            m = page.evaluate(MEASURE)
            bad = m["scroll"] > m["client"] or m["wide"]
            failures += bool(bad)
            print(f"{name:<55} {m['scroll']:>11} {m['client']:>11} {m['inner']:>10}"
                  f"{'  SCROLLS SIDEWAYS' if bad else ''}")
            for element in m["wide"]:
                print(f"    {element}")
            if name in SCREENSHOTS:
                page.screenshot(path=shots / SCREENSHOTS[name])
        browser.close()
    print(f"docs-widths: {len(pages)} pages at {WIDTH} px, {failures} scroll sideways; "
          f"screenshots in {shots}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
