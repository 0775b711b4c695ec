# `campaign report`'s HTML opened in headless Chromium (Debian's `chromium`, installed by
# scripts/setup.sh) (issue 20): a ledger from two real `bench` runs against a fake-engine server
# is rendered; the page logs nothing to the console and loads nothing; after layout every SVG
# chart has a size and drawn marks inside it (measured by a script added to a copy of the page,
# read back with --dump-dom); and a screenshot is not blank (Pillow counts its colours).
import json
import os
import re
import shutil
import subprocess

import pytest
from PIL import Image

from conftest import BINARY, start_server

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

# Added before </body> of a copy of the report: measures every <svg> after layout and writes the
# result as JSON into the page, where --dump-dom shows it.
MEASURE = """<script>
window.qsErrors = [];
window.addEventListener('error', e => window.qsErrors.push(String(e.message)));
window.addEventListener('load', () => {
  const svgs = [...document.querySelectorAll('svg')].map(s => {
    const r = s.getBoundingClientRect();
    const marks = [...s.querySelectorAll('path, polyline, line, rect, circle')].filter(m => {
      const b = m.getBBox();
      return b.width > 0 || b.height > 0;
    });
    return {width: r.width, height: r.height, marks: marks.length, text: s.textContent.length};
  });
  const pre = document.createElement('pre');
  pre.id = 'qs-measure';
  pre.textContent = JSON.stringify({svgs, errors: window.qsErrors, title: document.title});
  document.body.appendChild(pre);
});
</script>"""


def chromium(*args):
    """Runs headless Chromium; returns (stdout, stderr)."""
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--no-first-run", "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout, r.stderr


def console_lines(stderr):
    """What the page wrote to the console (Chromium logs it as "INFO:CONSOLE:<line>] ...")."""
    return [l for l in stderr.splitlines() if re.search(r":CONSOLE[:(]", l) or "Failed to load resource" in l]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    if CHROMIUM is None:
        pytest.fail("chromium is not installed: run scripts/setup.sh (Debian package chromium)")
    d = tmp_path_factory.mktemp("report")
    fixture = d / "f.jsonl"
    body = {"model": "tiny", "max_tokens": 16, "ignore_eos": True,
            "messages": [{"role": "user", "content": "[[repeat]] go"}]}
    fixture.write_text(json.dumps({"endpoint": "/v1/chat/completions", "body": body}) + "\n")
    ledger = d / "ledger.jsonl"
    proc, base = start_server(api_key=None)
    try:
        for exp, clients in (("exp-a", 2), ("exp-a", 4), ("exp-b", 2), ("exp-b", 4)):
            out = d / f"{exp}-{clients}.json"
            subprocess.run([BINARY, "bench", "--url", base, "--fixture", str(fixture), "--clients", str(clients),
                            "--requests", "12", "--gpu-hourly-cost", "4", "--json-out", str(out)],
                           check=True, capture_output=True, timeout=120)
            subprocess.run([BINARY, "campaign", "record", "--ledger", str(ledger), "--config", exp,
                            "--result", str(out), "--experiment", exp], check=True, capture_output=True, timeout=60)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    html = d / "report.html"
    subprocess.run([BINARY, "campaign", "report", "--ledger", str(ledger), "--output", str(html)], check=True,
                   capture_output=True, timeout=60)
    return html


def test_charts_are_laid_out_with_marks_and_no_console_output(report):
    page = report.read_text()
    assert page.count("<svg") == 3
    measured = report.with_name("measured.html")
    measured.write_text(page.replace("</body>", MEASURE + "\n</body>"))
    dom, stderr = chromium("--allow-file-access-from-files", "--dump-dom", measured.as_uri())
    m = re.search(r'<pre id="qs-measure">(.*?)</pre>', dom, re.S)
    assert m, dom[-2000:]
    got = json.loads(m.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"))
    assert got["errors"] == []
    assert console_lines(stderr) == []
    assert len(got["svgs"]) == 3
    for s in got["svgs"]:
        assert s["width"] >= 200 and s["height"] >= 100, s
        assert s["marks"] >= 3, s  # axes, gridlines, bars or lines
        assert s["text"] > 0, s    # titles and tick labels


def test_the_console_check_sees_errors(tmp_path):
    if CHROMIUM is None:
        pytest.fail("chromium is not installed: run scripts/setup.sh (Debian package chromium)")
    bad = tmp_path / "bad.html"
    bad.write_text('<html><body><script>console.error("boom"); throw new Error("bad")</script></body></html>')
    _, stderr = chromium("--dump-dom", bad.as_uri())
    lines = console_lines(stderr)
    assert any("boom" in l for l in lines) and any("Uncaught Error: bad" in l for l in lines), stderr[-2000:]


def test_screenshot_is_not_blank(report):
    png = report.with_name("shot.png")
    _, stderr = chromium("--window-size=1200,1600", f"--screenshot={png}", report.as_uri())
    assert console_lines(stderr) == []
    img = Image.open(png).convert("RGB")
    assert img.size == (1200, 1600)
    colours = img.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 20, "too few colours: blank or unstyled"
    background = max(colours)[1]
    drawn = sum(n for n, c in colours if c != background)
    assert drawn > 0.02 * img.size[0] * img.size[1], f"only {drawn} pixels differ from the background"
