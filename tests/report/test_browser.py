"""The gallery and a platform's index as a person sees them: rendered by headless Chromium at
1280 px from the committed reports (rebuilt in a copy): no sideways overflow, a bar for every
platform in every panel, no broken local link; a report folder named with markup runs no script.
Skipped where Chromium is absent (CI installs it)."""

import json
import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from kernel_lib.report.gallery import build_gallery
from kernel_lib.report.pages import rebuild_reports
from tests.fakes import MARKUP

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WIDTH = 1280
# Runs in the page once it has loaded; Chromium's --dump-dom prints the DOM with its result.
PROBE = """<script>addEventListener("load", () => {
  const local = [...document.querySelectorAll("a[href], img[src]")]
    .map(e => e.getAttribute("href") ?? e.getAttribute("src"))
    .filter(u => !/^(data:|https?:|mailto:|#)/.test(u));
  const panels = [...document.querySelectorAll("figure.panel")].map(f => ({
    key: f.dataset.key, bars: +f.dataset.bars, platforms: +f.dataset.platforms,
    width: f.getBoundingClientRect().width, image: f.querySelector("img").naturalWidth}));
  const out = document.createElement("pre"); out.id = "probe";
  out.textContent = JSON.stringify({scroll: document.documentElement.scrollWidth,
    client: document.documentElement.clientWidth, local, panels});
  document.body.append(out);
});</script>"""

pytestmark = [
    pytest.mark.slow,  # a gallery built and rendered in Chromium
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium here (CI installs it)"),
]


def _chromium(*args: str) -> str:
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    done = subprocess.run(
        [*command, f"--window-size={WIDTH},900", *args],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _probe(page: Path) -> dict:
    """The page as Chromium laid it out (a copy with PROBE, beside it so links resolve alike)."""
    probed = page.with_name("probed-" + page.name)
    probed.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    dom = _chromium("--virtual-time-budget=10000", "--dump-dom", probed.as_uri())
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    return json.loads(found.group(1).replace("&amp;", "&").replace("&lt;", "<"))


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> Path:
    """The committed reports (cpu, h100: two platforms with shared headlines), rebuilt in a copy."""
    outputs = tmp_path_factory.mktemp("browser") / "outputs"
    for name in ("cpu", "h100"):
        shutil.copytree(ROOT / "outputs" / name, outputs / name)
    rebuild_reports(outputs=outputs)
    build_gallery(outputs)
    return outputs


@pytest.mark.parametrize("page", ["index.html", "cpu/index.html"])
def test_page_fits_and_links(outputs, page):
    target = outputs / page
    seen = _probe(target)
    assert seen["scroll"] <= seen["client"] <= WIDTH, f"{page} overflows sideways: {seen}"
    assert seen["panels"], "no headline panel"
    for panel in seen["panels"]:
        assert panel["image"] > 0, f"{panel['key']}: its figure did not load"
        assert panel["bars"] >= panel["platforms"], f"{panel['key']}: a platform lacks its bar"
    broken = [u for u in seen["local"] if not (target.parent / unquote(urlparse(u).path)).exists()]
    assert not broken, f"{page}: broken local links {broken}"
    _chromium(f"--screenshot={target.with_suffix('.png')}", target.as_uri())


def test_platforms_meet_in_one_panel(outputs):
    """Every headline that both cpu and h100 recorded is one panel with a bar of each."""
    seen = _probe(outputs / "index.html")
    shared = [p for p in seen["panels"] if p["platforms"] == 2]
    keys = {p["key"] for p in shared}
    assert {"moe.forward_vs_dense", "backend.bf16_gemm_vs_fp32"} <= keys, keys
    assert all(p["bars"] >= 2 for p in shared)


def test_a_folder_named_with_markup_runs_no_script(tmp_path):
    """The committed cpu report in a folder named `x<img src=x onerror=...>`, its run.json's
    platform that name too: its gallery (the platform listing, the headline table's column) and
    its own index, as Chromium runs them."""
    outputs = tmp_path / "outputs"
    shutil.copytree(ROOT / "outputs" / "cpu", outputs / MARKUP)
    run_file = outputs / MARKUP / "run.json"
    run_file.write_text(json.dumps({**json.loads(run_file.read_text()), "platform": MARKUP}))
    rebuild_reports(outputs=outputs)
    for page in (build_gallery(outputs), outputs / MARKUP / "index.html"):
        dom = _chromium("--virtual-time-budget=5000", "--dump-dom", page.as_uri())
        assert "<body" in dom and "data-pwned" not in dom, f"{page}: the folder's script ran"
        assert "x&lt;img src=x onerror=" in dom  # shown, as text
