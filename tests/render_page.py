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
from PyQt6.QtWebEngineWidgets import QWebEngineView
from PyQt6.QtWidgets import QApplication

PROBE = """JSON.stringify({
  h1: (document.querySelector('h1') || {}).textContent || null,
  tables: document.querySelectorAll('table').length,
  rows: document.querySelectorAll('tr').length,
  trust: Array.from(document.querySelectorAll('ul.trust li')).map(li => li.className + ': ' + li.textContent),
  images: document.images.length,
  decoded: Array.from(document.images).filter(i => i.complete && i.naturalWidth > 0).length,
  scroll_width: document.documentElement.scrollWidth,
  window_width: window.innerWidth,
  height: document.documentElement.scrollHeight
})"""


def main(page: str, shot: str, width: int = 1100) -> None:
    app = QApplication(sys.argv[:1])
    view = QWebEngineView()
    view.resize(QSize(width, 900))
    out: dict = {}

    def loaded(ok: bool) -> None:
        out["loaded"] = ok
        QTimer.singleShot(300, lambda: view.page().runJavaScript(PROBE, probed))

    def probed(text: str) -> None:
        out.update(json.loads(text))
        view.resize(QSize(width, min(int(out["height"]), 16000)))
        QTimer.singleShot(700, capture)

    def capture() -> None:
        image = view.grab()
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
