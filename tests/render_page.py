"""Render an HTML file in a real headless Chromium (Qt WebEngine) and report what a reader sees.

``python tests/render_page.py PAGE.html SHOT.png [WIDTH]`` prints one JSON object: the page's h1,
its tables and rows, its images and how many decoded, whether anything is wider than the window,
and the full-page screenshot's size. Run as its own process: Qt owns the process it starts in.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("QTWEBENGINE_CHROMIUM_FLAGS", "--no-sandbox --disable-gpu --disable-dev-shm-usage")
os.environ.setdefault("QTWEBENGINE_DISABLE_SANDBOX", "1")

from PyQt6.QtCore import QSize, QTimer, QUrl
from PyQt6.QtGui import QImage, QPainter
from PyQt6.QtWebEngineWidgets import QWebEngineView
from PyQt6.QtWidgets import QApplication

PROBE = """JSON.stringify({
  h1: (document.querySelector('h1') || {}).textContent || null,
  tables: document.querySelectorAll('table').length,
  rows: document.querySelectorAll('tr').length,
  trust: Array.from(document.querySelectorAll('ul.trust li')).map(li => li.className + ': ' + li.textContent),
  images: document.images.length,
  decoded: Array.from(document.images).filter(i => i.complete && i.naturalWidth > 0).length,
  links: Array.from(document.links).map(a => a.getAttribute('href')),
  table_classes: Array.from(document.querySelectorAll('table')).map(t => t.className),
  scroll_width: document.documentElement.scrollWidth,
  window_width: window.innerWidth,
  height: document.documentElement.scrollHeight
})"""


STEP = 900  # the window's height: one grab


def main(page: str, shot: str, width: int = 1100) -> None:
    app = QApplication(sys.argv[:1])
    view = QWebEngineView()
    view.resize(QSize(width, STEP))
    out: dict = {}

    def loaded(ok: bool) -> None:
        out["loaded"] = ok
        QTimer.singleShot(300, lambda: view.page().runJavaScript(PROBE, probed))

    def probed(text: str) -> None:
        out.update(json.loads(text))
        QTimer.singleShot(300, lambda: shoot(0))

    # Offscreen Chromium paints only the window's height: a page resized to its full height came
    # back blank below the first screen. The full page is grabbed one window at a time, stitched.
    full = {"image": None}

    def shoot(top: int) -> None:
        height = min(int(out["height"]), 16000)
        if full["image"] is None:
            full["image"] = QImage(width, height, QImage.Format.Format_RGB32)
            full["image"].fill(0xFFFFFFFF)
        view.page().runJavaScript(f"window.scrollTo(0, {top}); window.scrollY",
                                  lambda y: QTimer.singleShot(250, lambda: paste(top, int(y or 0), height)))

    def paste(top: int, y: int, height: int) -> None:
        shot_part = view.grab().toImage()
        painter = QPainter(full["image"])
        painter.drawImage(0, y, shot_part)
        painter.end()
        if top + STEP < height:
            shoot(top + STEP)
        else:
            capture()

    def capture() -> None:
        image = full["image"]
        out["shot_saved"] = image.save(shot)
        out["shot_size"] = [image.width(), image.height()]
        app.quit()

    view.loadFinished.connect(loaded)
    view.load(QUrl.fromLocalFile(os.path.abspath(page)))
    view.show()
    QTimer.singleShot(60_000, app.quit)
    app.exec()
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], *(int(a) for a in sys.argv[3:4]))
