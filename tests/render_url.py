"""Open a web app's URL in a real headless Chromium (Qt WebEngine), wait until its text shows
every word asked for, and report what a reader sees.

``python tests/render_url.py URL SHOT.png WORD [WORD ...]`` prints one JSON object: whether the
page loaded, the words found, the page's visible text (innerText, first 200,000 characters), and
the screenshot's size. A JavaScript app renders after the load event, so the text is polled
(every 0.5 s, up to 90 s) rather than read once. Run as its own process: Qt owns the process.
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


def main(url: str, shot: str, words: list[str], width: int = 1600) -> None:
    app = QApplication(sys.argv[:1])
    view = QWebEngineView()
    view.resize(QSize(width, 1000))
    out: dict = {"loaded": False, "found": [], "polls": 0}

    def poll() -> None:
        view.page().runJavaScript("document.body ? document.body.innerText : ''", read)

    def read(text: str) -> None:
        out["polls"] += 1
        out["text"] = (text or "")[:200_000]
        out["found"] = [w for w in words if w in out["text"]]
        if len(out["found"]) == len(words) or out["polls"] >= 180:
            QTimer.singleShot(500, capture)
        else:
            QTimer.singleShot(500, poll)

    def loaded(ok: bool) -> None:
        out["loaded"] = ok
        poll()

    def capture() -> None:
        image = view.grab()
        out["url"] = view.url().toString()
        out["shot_saved"] = image.save(shot)
        out["shot_size"] = [image.width(), image.height()]
        app.quit()

    view.loadFinished.connect(loaded)
    view.load(QUrl(url))
    view.show()
    QTimer.singleShot(150_000, app.quit)
    app.exec()
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
