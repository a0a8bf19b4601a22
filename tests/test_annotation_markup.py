"""What an annotator reads in Label Studio: a response's markdown rendered readable, and text from
data never active HTML (no script, event handler, link or image survives), in both labelling configs,
which also give the texts the width the unused Regions panel took."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from judgebias.annotation.markup import allowlisted, markdown_html, with_style
from judgebias.annotation.pairwise_tasks import labeling_config
from judgebias.annotation.ratings import rating_config

HOSTILE = ("<script>alert(1)</script>\n\n<img src=x onerror=\"alert(2)\">\n\n[click](javascript:alert(3)) "
           "<a href=\"javascript:alert(4)\">a</a> ![pixel](http://evil.example/x.png) <https://evil.example> "
           "<div onclick=\"alert(5)\" style=\"position:fixed\">d</div> <iframe src=\"//e\"></iframe>\n\n"
           "```\" onmouseover=\"alert(6)\nx\n```\n")


def _tags(fragment: str) -> list[str]:
    return re.findall(r"<([^>]*)>", fragment)


def test_markdown_becomes_readable_html():
    text = "## Plan\n\nHere is **the answer** and *why*:\n\n1. first\n2. second\n\n- a\n- b\n\n" \
           "```python\nprint('<b>')\n```\n\nline one\nline two"
    assert markdown_html(text) == (
        "<h2>Plan</h2>\n<p>Here is <strong>the answer</strong> and <em>why</em>:</p>\n"
        "<ol>\n<li>first</li>\n<li>second</li>\n</ol>\n<ul>\n<li>a</li>\n<li>b</li>\n</ul>\n"
        "<pre><code class=\"language-python\">print('&lt;b&gt;')\n</code></pre>\n"
        "<p>line one<br>\nline two</p>\n")


def test_hostile_text_stays_text():
    out = markdown_html(HOSTILE)
    # Every tag left is a plain structural one without attributes: no script, img, a, iframe, div,
    # no event handler, style or URL attribute.
    assert {t.split()[0].strip("/") for t in _tags(out)} <= {"p", "pre", "code", "br"}
    assert all(" " not in t for t in _tags(out))
    # What the hostile markup said is shown to the reader as text (escaped), not dropped silently.
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in out
    assert "&lt;img src=x onerror=\"alert(2)\"&gt;" in out
    assert "[click](javascript:alert(3))" in out and "![pixel](http://evil.example/x.png)" in out
    assert "<a" not in out and "<img" not in out and "<iframe" not in out and "<div" not in out


def test_the_allowlist_drops_tags_and_attributes_whatever_the_renderer_emits():
    dirty = ("<p onclick=\"x()\">a<script>b()</script></p><a href=\"javascript:c()\">link</a>"
             "<img src=x onerror=d()><ol start=\"3\" onmouseover=\"e()\"><li>i</li></ol>"
             "<code class=\"language-py\" style=\"x\">c</code><code class='x\" onload=\"f()'>g</code>"
             "<td style=\"background:url(javascript:h())\">t</td><!-- <script>i()</script> -->")
    # The script's text survives as inert text; its tag, the link, the image and every attribute
    # outside (ol start, code language class) are gone.
    assert allowlisted(dirty) == ("<p>ab()</p>link<ol start=\"3\"><li>i</li></ol>"
                                  "<code class=\"language-py\">c</code><code>g</code><td>t</td>")


def test_bad_values_are_named():
    with pytest.raises(ValueError, match="as a string, got float"):
        markdown_html(float("nan"))
    with pytest.raises(ValueError, match="no <!-- STYLE --> line"):
        with_style("<View/>")


@pytest.mark.parametrize("config, fields", [(labeling_config(), ["prompt", "left", "right"]),
                                            (rating_config(1, 5), ["prompt", "response", "rubric"])])
def test_configs_show_the_rendered_texts_and_hide_the_regions_panel(config, fields):
    root = ET.fromstring(config)
    shown = [(e.get("name"), e.get("value")) for e in root.iter("HyperText")]
    assert shown == [(f, f"${f}_html") for f in fields]
    for e in root.iter("HyperText"):  # no region can be drawn, no link opened from the texts
        got = (e.get("inline"), e.get("selectionEnabled"), e.get("clickableLinks"))
        assert got == ("true", "false", "false")
    assert not list(root.iter("Text"))  # no raw markdown shown anywhere
    style = "".join(e.text or "" for e in root.iter("Style"))
    assert ".lsf-sidepanels__wrapper_align_right { display: none !important; }" in style
    assert ".lsf-sidepanels { padding-right: 0 !important; }" in style
    control = next(root.iter("Choices"))
    assert control.get("toName") in fields  # the choice still names a shown object
