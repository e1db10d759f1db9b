"""Opening a `trove report` page in headless Chromium (Debian's `chromium`) and reading back what
it drew: the DOM after the page's script ran, what the console said, a screenshot.

Shared by test_report.py and test_hostile_report.py. A missing browser is a failure, not a skip:
scripts/install-deps --test installs it.
"""
import html.parser
import json
import os
import re
import subprocess
import tempfile

import pytest

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000"]


def chromium(page, *args, fragment=""):
    """Runs the browser on the page file (#fragment appended); returns (stdout, stderr) as text."""
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: scripts/install-deps --test installs chromium")
    with tempfile.TemporaryDirectory(prefix="trove-report-chromium-") as profile:
        cmd = [CHROMIUM] + FLAGS + [f"--user-data-dir={profile}"] + list(args) + ["file://" + os.path.abspath(page) + fragment]
        p = subprocess.run(cmd, capture_output=True, timeout=180, text=True, errors="replace")
    assert p.returncode == 0, (cmd, p.returncode, p.stderr[-3000:])
    return p.stdout, p.stderr


def console_errors(stderr):
    """Console messages at error level, and uncaught exceptions, as Chromium logs them."""
    return [line for line in stderr.splitlines()
            if "CONSOLE" in line and (":ERROR:" in line or "Uncaught" in line)]


# HTML elements without an end tag.
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Page(html.parser.HTMLParser):
    """What the rendered DOM holds: the root's attributes, the table's key cells, SVG shapes by
    the section they are in, every text."""

    def __init__(self, dom):
        super().__init__(convert_charrefs=True)
        self.root_attrs = {}
        self.keys = []            # text of each <td class="key"> in tbody#rows
        self.rects = {}           # section id -> <rect> count
        self.histograms = 0       # <svg class="histogram"> in the table
        self.bars = 0             # <rect> in svg.change-bars
        self.bar_widths = []      # their widths, in order
        self.scripts = 0
        self.text = []
        self._stack = []          # (tag, attrs)
        self._key = None
        self.feed(dom)

    def _inside(self, tag=None, id=None, cls=None):
        for t, a in self._stack:
            if (tag is None or t == tag) and (id is None or a.get("id") == id) and \
               (cls is None or cls in (a.get("class") or "").split()):
                return True
        return False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "html":
            self.root_attrs = a
        if tag == "script":
            self.scripts += 1
        if tag == "rect":
            for t, pa in self._stack:
                if t == "section":
                    self.rects[pa.get("id")] = self.rects.get(pa.get("id"), 0) + 1
            if self._inside(tag="svg", cls="change-bars"):
                self.bars += 1
                self.bar_widths.append(float(a.get("width", "0")))
        if tag == "svg" and "histogram" in (a.get("class") or "") and self._inside(id="rows"):
            self.histograms += 1
        if tag in VOID:
            return
        self._stack.append((tag, a))
        if tag == "td" and a.get("class") == "key" and self._inside(id="rows"):
            self._key = []

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.handle_endtag(tag)

    def handle_endtag(self, tag):
        if all(t != tag for t, _ in self._stack):
            return
        while self._stack:
            t, _ = self._stack.pop()
            if t == "td" and self._key is not None:
                self.keys.append("".join(self._key))
                self._key = None
            if t == tag:
                break

    def handle_data(self, data):
        if self._key is not None:
            self._key.append(data)
        self.text.append(data)


def render(page, fragment=""):
    """The page as the browser drew it, after asserting its script ran cleanly."""
    out, err = chromium(page, "--dump-dom", fragment=fragment)
    p = Page(out)
    assert p.root_attrs.get("data-rendered") == "1", (p.root_attrs, err[-2000:])
    assert p.root_attrs.get("data-errors", "") == "", p.root_attrs.get("data-errors")
    assert console_errors(err) == [], console_errors(err)
    return p


def screenshot(page, png):
    chromium(page, f"--screenshot={png}", "--window-size=1400,1000", "--hide-scrollbars")
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def embedded_data(page):
    """The JSON the page carries, read as a browser would (JSON.parse of the script's text)."""
    text = open(page, encoding="utf-8").read()
    m = re.search(r'<script type="application/json" id="trove-data">(.*?)</script>', text, re.S)
    assert m, "no data block"
    return json.loads(m.group(1)), text[:m.start()] + text[m.end():]
