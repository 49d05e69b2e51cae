"""``pydla report``: the page's data, its self-containment, and that it renders in Chromium."""

import json
import re
import shutil
import subprocess

import pytest

from pydla.loadable import read_loadable
from pydla.tools.cli import main
from pydla.tools.cmd_report import lifetimes, report_data
from pydla.tools.report_page import render_html
from tests.tools.tiny import conv_chain, save_model

CHROMIUM = shutil.which("chromium")


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    folder = tmp_path_factory.mktemp("report")
    onnx_path, bin_path = save_model(conv_chain(), folder)
    profile = folder / "profile.json"
    assert main(["bench", f"--loadEngine={bin_path}", "--iterations=5", "--warmUp=0",
                 "--duration=0", f"--exportProfile={profile}"]) == 0
    return bin_path, profile


def test_data_graph_and_memory_timeline(engine):
    bin_path, _ = engine
    prog = read_loadable(bin_path.read_bytes())
    data = report_data(prog, None)
    assert [tuple(e) for e in data["edges"]] == [(0, 1), (1, 2)]
    assert [lay["fused_from"] for lay in data["layers"]][1] == ["conv2", "bn2", "relu2"]
    spans = {s["name"]: s for s in lifetimes(prog)}
    assert spans["x"]["first"] == -1 and spans["y"]["last"] == len(prog.layers) - 1
    for s in spans.values():
        assert s["first"] <= s["last"]
        assert 0 <= s["offset"] and s["offset"] + s["nbytes"] <= prog.arena_bytes
    # Tensors alive at the same time never share arena bytes unless one aliases the other.
    items = list(spans.values())
    for i, a in enumerate(items):
        for b in items[i + 1:]:
            live = a["first"] <= b["last"] and b["first"] <= a["last"]
            overlap = a["offset"] < b["offset"] + b["nbytes"] and \
                b["offset"] < a["offset"] + a["nbytes"]
            assert not (live and overlap and not a["alias"] and not b["alias"]), (a, b)


def test_page_is_self_contained(engine, tmp_path, capsys):
    bin_path, profile = engine
    out = tmp_path / "r.html"
    assert main(["report", str(bin_path), f"--profile={profile}", "-o", str(out)]) == 0
    page = out.read_text()
    assert "with profile" in capsys.readouterr().out
    assert not re.search(r"<(link|img|iframe)\b|\bsrc=|@import|url\(http", page)
    # The only URL is the SVG namespace name, which is never fetched.
    assert set(re.findall(r"https?://[^\s'\"]+", page)) == {"http://www.w3.org/2000/svg"}
    data = json.loads(re.search(r'id="pydla-data">(.*?)</script>', page, re.S).group(1))
    assert [r["name"] for r in data["profile"]] == ["conv1", "conv2", "conv3"]


def test_profile_of_another_engine_is_refused(engine, tmp_path, capsys):
    bin_path, _ = engine
    bad = tmp_path / "p.json"
    bad.write_text(json.dumps([{"count": 1}, {"name": "nope", "timeMs": 1, "averageMs": 1,
                                              "medianMs": 1, "percentage": 100}]))
    assert main(["report", str(bin_path), f"--profile={bad}", "-o", str(tmp_path / "r.html")]) \
        == 1
    assert "not in this engine" in capsys.readouterr().err


def _chromium(page, tmp_path):
    """Headless Chromium's DOM after scripts ran, and its log (console messages included)."""
    profile_dir = tmp_path / "chromium-profile"
    proc = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", f"--user-data-dir={profile_dir}", "--enable-logging=stderr", "--v=0",
         "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120)
    return proc.stdout, proc.stderr


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_renders_in_chromium_without_console_errors(engine, tmp_path):
    bin_path, profile = engine
    page = tmp_path / "report.html"
    assert main(["report", str(bin_path), f"--profile={profile}", "-o", str(page)]) == 0
    dom, log = _chromium(page, tmp_path)
    console = [line for line in log.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    assert console == []
    assert 'id="pydla-rendered"' in dom and 'id="pydla-error"' not in dom
    assert dom.count('class="layer"') == 3
    assert "▸ bn2" in dom  # fused nodes are listed inside their layer's box
    assert 'id="time-svg"' in dom and 'id="memory-svg"' in dom and 'id="precision-svg"' in dom
    assert dom.count('class="tensor"') == len(lifetimes(read_loadable(bin_path.read_bytes())))


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_the_render_check_catches_script_errors(tmp_path):
    """Guards the check above: a page whose script fails is reported as failed."""
    page = tmp_path / "broken.html"
    page.write_text(render_html({"engine": {}, "layers": None}, "broken"))
    dom, log = _chromium(page, tmp_path)
    assert 'id="pydla-rendered"' not in dom and 'id="pydla-error"' in dom
    assert any(":CONSOLE" in line for line in log.splitlines())
