"""Log in to a Label Studio server in a real headless Chromium (Qt WebEngine), open one task's
labelling page and report what a reader sees of it.

``python tests/render_ls_task.py BASE_URL USER PASSWORD TASK_URL SHOT.png`` prints one JSON object:
the page's visible text, the widths of the page and of the two response columns (``.jb-col``), the
right-hand side panel's width and display, the tags inside the columns, and ``xss``: what a hostile
text would have set on ``window.__jbxss`` had it run. Run as its own process: Qt owns the process.
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

MEASURE = """(() => {
  const all = s => Array.from(document.querySelectorAll(s));
  const width = e => e ? Math.round(e.getBoundingClientRect().width) : null;
  const side = all('.lsf-sidepanels__wrapper_align_right')[0];
  return JSON.stringify({
    text: document.body ? document.body.innerText.slice(0, 20000) : '',
    page: width(document.querySelector('.lsf-sidepanels')),
    side: side ? {width: width(side), display: getComputedStyle(side).display} : null,
    columns: all('.jb-col').map(width),
    tags: all('.jb-col *, .jb-md *').map(e => e.tagName.toLowerCase()),
    list_style: all('.jb-col li').map(e => getComputedStyle(e).listStyleType),
    xss: window.__jbxss || null,
  });
})()"""


def main(base: str, user: str, password: str, task_url: str, shot: str) -> None:
    app = QApplication(sys.argv[:1])
    view = QWebEngineView()
    view.resize(QSize(1600, 1000))
    state = {"stage": "login", "polls": 0}

    def loaded(ok: bool) -> None:
        if state["stage"] == "login":
            state["stage"] = "submitted"
            fill = (f"document.querySelector('input[name=email]').value = {json.dumps(user)};"
                    f"document.querySelector('input[name=password]').value = {json.dumps(password)};"
                    "document.querySelector('form').submit();")
            QTimer.singleShot(1000, lambda: view.page().runJavaScript(fill))
        elif state["stage"] == "submitted":
            state["stage"] = "task"
            view.load(QUrl(task_url))
        elif state["stage"] == "task":
            state["stage"] = "polling"
            QTimer.singleShot(1000, poll)

    def poll() -> None:
        view.page().runJavaScript(MEASURE, read)

    def read(raw: str) -> None:
        state["polls"] += 1
        seen = json.loads(raw) if raw else {}
        if len(seen.get("columns") or []) == 2 or state["polls"] >= 180:
            # A moment more for a hostile handler to run, had it survived.
            QTimer.singleShot(2000, lambda: view.page().runJavaScript(MEASURE, finish))
        else:
            QTimer.singleShot(500, poll)

    def finish(raw: str) -> None:
        out = json.loads(raw) if raw else {}
        out["shot_saved"] = view.grab().save(shot)
        out["url"] = view.url().toString()
        print(json.dumps(out))
        app.quit()

    view.loadFinished.connect(loaded)
    view.load(QUrl(base.rstrip("/") + "/user/login/"))
    view.show()
    QTimer.singleShot(150_000, app.quit)
    app.exec()


if __name__ == "__main__":
    main(*sys.argv[1:6])
