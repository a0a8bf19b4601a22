"""A response's markdown as the inert HTML an annotator reads in Label Studio's ``<HyperText>``.

Model responses are markdown (headers, lists, bold, code); shown raw, an annotator reads ``**`` and
``###`` noise. The text comes from data, so nothing in it may become active HTML: markdown-it renders
it with raw HTML off (a ``<script>`` in a response is shown as text) and without links or images
(``[x](javascript:...)`` stays text, no remote image loads when the task opens), and the result is
then rebuilt tag by tag from an allowlist (no attributes but a list's start, a code block's
language class and a table cell's alignment), so whatever the renderer emits, no tag outside the
list and no event handler, ``style`` or URL reaches the page. Pure: no server."""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser

from markdown_it import MarkdownIt

# Text structure only: no a, img, iframe, form, style, script, svg or anything else that loads or runs.
ALLOWED_TAGS = frozenset({
    "p", "br", "hr", "strong", "em", "s", "code", "pre", "blockquote", "ul", "ol", "li",
    "h1", "h2", "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr", "th", "td",
})
_VOID = frozenset({"br", "hr"})
# The only attributes markdown-it emits for these tags, each with the values it can produce.
_ALLOWED_ATTRS = {
    ("ol", "start"): re.compile(r"\d{1,9}"),
    ("code", "class"): re.compile(r"language-[A-Za-z0-9_+#.-]{1,40}"),
    ("th", "style"): re.compile(r"text-align:(left|right|center)"),
    ("td", "style"): re.compile(r"text-align:(left|right|center)"),
}


def _renderer() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "breaks": True, "linkify": False})
    md.enable(["table", "strikethrough"])
    md.disable(["link", "image", "autolink"])
    return md


_MD = _renderer()


class _Allowlist(HTMLParser):
    """Re-emits only allowed tags (with allowed attributes), escaping every text and dropping the rest;
    the text inside a dropped tag is kept as text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in ALLOWED_TAGS:
            return
        kept = "".join(f' {name}="{html.escape(value)}"' for name, value in attrs
                       if value is not None and (rule := _ALLOWED_ATTRS.get((tag, name)))
                       and rule.fullmatch(value))
        self.out.append(f"<{tag}{kept}>")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        if tag in ALLOWED_TAGS and tag not in _VOID:
            self.out.append(f"</{tag}>")

    def handle_data(self, data: str) -> None:
        self.out.append(html.escape(data, quote=False))


def allowlisted(fragment: str) -> str:
    """``fragment`` with every tag outside ``ALLOWED_TAGS``, every attribute outside the allowlist,
    comments and processing instructions removed, and all text escaped."""
    parser = _Allowlist()
    parser.feed(fragment)
    parser.close()
    return "".join(parser.out)


def markdown_html(text: str) -> str:
    """``text`` (markdown or plain) as inert HTML for a ``<HyperText>`` field. A ValueError names a
    value that is not a string."""
    if not isinstance(text, str):
        raise ValueError(f"expected the text to show as a string, got {type(text).__name__}")
    return allowlisted(_MD.render(text))


# The labelling configs' <Style> (substituted for their <!-- STYLE --> line): Label Studio's own CSS
# resets lists, headings and code, so the rendered markdown gets a plain document look; and these
# tasks have no regions, so the right-hand Regions / Relations panel (a quarter of the width, whose
# collapsed state Label Studio 1.23 keeps only per browser) is hidden and its space given back
# (Label Studio sets the panels' room as an inline padding: overridden).
STYLE = """  <Style>
    .jb-col { flex: 1; min-width: 0; padding: 0 8px; }
    .jb-md { overflow-wrap: anywhere; line-height: 1.45; }
    .jb-md ul { list-style: disc; padding-left: 1.6em; margin: 0.3em 0; }
    .jb-md ol { list-style: decimal; padding-left: 1.6em; margin: 0.3em 0; }
    .jb-md p { margin: 0.3em 0; }
    .jb-md h1, .jb-md h2, .jb-md h3, .jb-md h4, .jb-md h5, .jb-md h6 {
      font-size: 1.05em; font-weight: 600; margin: 0.5em 0 0.2em; }
    .jb-md pre { white-space: pre-wrap; background: #f4f4f4; padding: 6px 8px; border-radius: 4px; }
    .jb-md code { font-family: monospace; background: #f4f4f4; }
    .jb-md blockquote { border-left: 3px solid #ccc; padding-left: 8px; color: #444; }
    .jb-md table { border-collapse: collapse; }
    .jb-md th, .jb-md td { border: 1px solid #ccc; padding: 2px 6px; }
    .lsf-sidepanels__wrapper_align_right { display: none !important; }
    .lsf-sidepanels { padding-right: 0 !important; }
  </Style>
"""


def with_style(config: str) -> str:
    """A labelling config with ``STYLE`` in place of its ``<!-- STYLE -->`` line."""
    if "<!-- STYLE -->" not in config:
        raise ValueError("the labelling config has no <!-- STYLE --> line to put the style in")
    return config.replace("  <!-- STYLE -->\n", STYLE, 1)
