"""The dashboard and the report in a real headless Chromium (Debian's, driven by Selenium).

The browser is the system's (``apt-get install chromium chromium-driver``; ``.ci/run``
installs it); nothing is downloaded.  Without it these tests are skipped on a
developer's machine and fail in CI (``CI=true``), where they must run (``make test``
runs the slow set there too).

What the page shows is read back from the page itself (the Plotly figure's data) and
checked against an independent computation: a DuckDB group-by written here, and
``jaxmodel.evaluate`` on the clicked row's inputs.  Screenshots go to
``$JAXMODEL_SCREENSHOTS`` when set (``docs/`` holds the committed ones), else a
temporary directory.
"""

import base64
import math
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("dash")
duckdb = pytest.importorskip("duckdb")
webdriver = pytest.importorskip("selenium.webdriver")

import jaxmodel  # noqa: E402
from jaxmodel.dashboard.app import build_app  # noqa: E402
from jaxmodel.dashboard.data import Catalog  # noqa: E402
from jaxmodel.dashboard.report import write_report  # noqa: E402
from jaxmodel.dashboard.serve import Background  # noqa: E402
from jaxmodel.spec import load_spec  # noqa: E402
from jaxmodel.sweeping import sweep  # noqa: E402

SPEC = Path(__file__).parents[1] / "specs" / "dashboard.toml"
WAIT_S = 60


def _browser() -> tuple[str, str]:
    chrome = next((shutil.which(n) for n in ("chromium", "chromium-browser")
                   if shutil.which(n)), None)
    driver = shutil.which("chromedriver")
    if chrome and driver:
        return chrome, driver
    message = ("Chromium and its driver are needed for the browser tests: "
               "apt-get install -y chromium chromium-driver")
    if os.environ.get("CI") == "true":
        pytest.fail(message + " (CI must run them; .ci/run installs them)")
    pytest.skip(message)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("browser") / "dash"
    sweep(SPEC, path)
    return path


@pytest.fixture(scope="module")
def driver():
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    chrome, chromedriver = _browser()
    options = Options()
    options.binary_location = chrome
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                "--window-size=1400,1000", "--disable-gpu", "--no-first-run",
                # nothing leaves the machine: requests other than to localhost fail
                "--proxy-server=127.0.0.1:9"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(chromedriver), options=options)
    yield d
    d.quit()


@pytest.fixture(scope="module")
def server(dataset):
    catalog = Catalog([dataset])
    bg = Background(build_app(catalog).server)
    yield bg
    bg.stop()
    catalog.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    where = os.environ.get("JAXMODEL_SCREENSHOTS")
    path = Path(where) if where else tmp_path_factory.mktemp("shots")
    path.mkdir(parents=True, exist_ok=True)
    return path


def wait_for(d, script: str, what: str):
    """Poll a JavaScript expression until it is truthy; its value."""
    end = time.monotonic() + WAIT_S
    while time.monotonic() < end:
        value = d.execute_script(script)
        if value:
            return value
        time.sleep(0.2)
    message = d.execute_script("var m = document.getElementById('message');"
                               "return m ? m.innerText : ''")
    raise AssertionError(f"timed out waiting for {what} (page message: {message!r})")


def figure_data(d, graph: str, key: str = "z"):
    return d.execute_script(
        f"var g = document.querySelector('#{graph} .js-plotly-plot');"
        f"return g && g.data && g.data.length ? g.data.map(t => t['{key}']) : null")


def screenshot(d, path: Path) -> None:
    d.save_screenshot(str(path))
    assert path.stat().st_size > 20_000  # a real picture, not a blank page


def choose(d, dropdown_id: str, text: str) -> None:
    """Pick an option of a dcc.Dropdown as a person does: open it, click the option."""
    from selenium.webdriver.common.by import By

    d.find_element(By.ID, dropdown_id).click()
    xpath = (f"//*[contains(concat(' ', @class, ' '), ' dash-options-list-option ') "
             f"and normalize-space()='{text}']")
    end = time.monotonic() + WAIT_S
    while not d.find_elements(By.XPATH, xpath):
        assert time.monotonic() < end, f"no option {text!r} in #{dropdown_id}"
        time.sleep(0.1)
    d.find_element(By.XPATH, xpath).click()
    wait_for(d, f"var b = document.getElementById('{dropdown_id}');"
             f"return b && b.innerText.trim() === '{text}'", f"{dropdown_id} = {text}")


def duck_grid(dataset: Path, where: str, agg: str) -> dict[tuple, float]:
    """The heatmap's numbers, computed here straight from the Parquet parts."""
    sql = (f"SELECT link_bandwidth_gb_s, pipeline_parallel, {agg}(mfu_percent) FILTER "
           f"(WHERE NOT isnan(mfu_percent)) FROM read_parquet('{dataset}/*.parquet', "
           f"can_have_nan = true) WHERE {where} GROUP BY ALL")
    return {(x, y): v for x, y, v in duckdb.sql(sql).fetchall()}


def cells(z) -> list[list]:
    """A heatmap's ``z`` as the page holds it, as lists (None for an empty cell):
    Plotly sends a numpy grid as a typed array ``{dtype, bdata (base64), shape}``,
    which plotly.js decodes for drawing but leaves as it is in ``data``."""
    if isinstance(z, dict):
        flat = np.frombuffer(base64.b64decode(z["bdata"]), dtype=z["dtype"])
        z = flat.reshape([int(n) for n in str(z["shape"]).split(",")]).tolist()
    return [[v if v is not None and math.isfinite(v) else None for v in row] for row in z]


def grid_mismatch(gd: dict, want: dict[tuple, float]) -> str | None:
    """How the heatmap ``gd`` differs from DuckDB's grid ``want`` (None: it does not)."""
    cells = 0
    for i, yv in enumerate(gd["y"]):
        for j, xv in enumerate(gd["x"]):
            key = next((k for k in want if math.isclose(k[0], xv, rel_tol=1e-6)
                        and k[1] == yv), None)
            got = gd["z"][i][j]
            if key is None or want[key] is None:
                if got is not None:
                    return f"cell ({xv}, {yv}): {got}, where DuckDB has no row"
            elif got is None or not math.isclose(got, want[key], rel_tol=1e-6):
                return f"cell ({xv}, {yv}): {got}, DuckDB {want[key]}"
            else:
                cells += 1
    return None if cells >= 10 else f"only {cells} cells with values"


@pytest.mark.slow  # about a minute here (jit compiles, a browser); CI runs the slow set
def test_filter_view_click_and_what_if(driver, server, dataset, shots):
    """Load the page; change the filter and the view and check the heatmap against a
    DuckDB group-by; click a cell and check the breakdown against jaxmodel.evaluate;
    edit an input in the what-if panel and check the new output."""
    from selenium.webdriver.common.actions.action_builder import ActionBuilder
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    d = driver
    d.get(server.url)
    wait_for(d, "return document.querySelector('#view-graph .js-plotly-plot .hm') !== null",
             "the first heatmap")
    first = figure_data(d, "view-graph")
    assert first and first[0]
    screenshot(d, shots / "dashboard_heatmap.png")

    # A filter (the free box) and a view change (y and the aggregation).
    where = "valid_layout and micro_batch == 4"
    box = d.find_element(By.ID, "where")
    box.send_keys(where + Keys.ENTER)
    choose(d, "y", "pipeline_parallel")
    choose(d, "agg", "mean")
    wait_for(d, "var g = document.querySelector('#view-graph .js-plotly-plot');"
             "return g && g.layout.title.text.startsWith('mean mfu_percent by "
             "link_bandwidth_gb_s and pipeline_parallel')", "the new view")
    # The filter's and the view's callbacks may land in either order: poll until the
    # figure shows the filtered grid (a wrong figure still fails, after WAIT_S).
    want = duck_grid(dataset, where.replace("==", "="), "avg")
    end = time.monotonic() + WAIT_S
    while True:
        gd = d.execute_script("var g = document.querySelector('#view-graph .js-plotly-plot');"
                              "return {x: g.data[0].x, y: g.data[0].y, z: g.data[0].z}")
        gd["z"] = cells(gd["z"])
        wrong = grid_mismatch(gd, want)
        if wrong is None or time.monotonic() > end:
            break
        time.sleep(0.2)
    assert wrong is None, wrong
    assert d.find_element(By.ID, "message").text == ""
    screenshot(d, shots / "dashboard_filtered.png")

    # Click the cell (lowest bandwidth, p = 8): the configuration panel opens on the best
    # row there, and its breakdown is the model's.
    x0, y0 = gd["x"][0], 8
    point = d.execute_script(
        "var g = document.querySelector('#view-graph .js-plotly-plot');"
        "var L = g._fullLayout, r = g.querySelector('.nsewdrag').getBoundingClientRect();"
        "return [r.left + L.xaxis.d2p(arguments[0]), r.top + L.yaxis.d2p(arguments[1])];",
        x0, y0)
    actions = ActionBuilder(d)
    actions.pointer_action.move_to_location(int(point[0]), int(point[1]))
    actions.pointer_action.click()
    actions.perform()
    bars = wait_for(d, "var g = document.querySelector('#breakdown-graph .js-plotly-plot');"
                    "return g && g.data && g.data.length ? g.data.map(t => t.y[0]) : null",
                    "the breakdown")
    rel = duckdb.sql(
        f"SELECT * FROM read_parquet('{dataset}/*.parquet', can_have_nan = true) "
        f"WHERE {where.replace('==', '=')} AND pipeline_parallel = 8 AND "
        f"abs(link_bandwidth_gb_s - {x0}) < 1e-3 ORDER BY mfu_percent DESC, config_id "
        "LIMIT 1")
    row = dict(zip(rel.columns, rel.fetchall()[0], strict=True))
    spec = load_spec(SPEC)
    inputs = {**spec.base, **{n: float(row[n]) for n in spec.varied}}
    out = jaxmodel.evaluate("seed", **inputs)
    terms = [out.compute_time_ms, out.tp_comm_ms, out.pp_comm_ms, out.pipeline_bubble_ms,
             out.dp_allreduce_ms]
    np.testing.assert_allclose(bars, np.asarray(terms, dtype=np.float64), rtol=1e-6)
    assert f"config_id {int(row['config_id'])}" in d.find_element(By.ID, "config-row").text
    wait_for(d, "var g = document.querySelector('#tornado-graph .js-plotly-plot');"
             "return g && g.data && g.data.length && g.data[0].type === 'bar'", "the tornado")
    screenshot(d, shots / "dashboard_configuration.png")

    # What if: twice the GPUs' speed.
    whatif_id = '{"input":"compute_tflops","type":"whatif"}'
    field = d.find_element(By.XPATH, f"//input[@id='{whatif_id}']")
    field.send_keys(Keys.CONTROL, "a")
    field.send_keys("1000")
    new = jaxmodel.evaluate("seed", **{**inputs, "compute_tflops": 1000.0})
    what_if = wait_for(
        d, "var g = document.querySelector('#whatif-graph .js-plotly-plot');"
        "return g && g.data && g.data.length && g.data[0].x.length == 2 ? "
        "g.data.map(t => t.y[1]) : null", "the what-if breakdown")
    wait_for(d, f"var e = document.getElementById('whatif-out-step_time_ms');"
             f"return e && e.innerText === {format_like_page(new.step_time_ms)!r}",
             "the what-if step time")
    what_if = figure_data(d, "whatif-graph", "y")
    np.testing.assert_allclose([t[1] for t in what_if],
                               [float(new.compute_time_ms), float(new.tp_comm_ms),
                                float(new.pp_comm_ms), float(new.pipeline_bubble_ms),
                                float(new.dp_allreduce_ms)], rtol=1e-6)
    assert float(new.step_time_ms) < float(out.step_time_ms)
    d.execute_script("document.getElementById('whatif-graph').scrollIntoView()")
    screenshot(d, shots / "dashboard_whatif.png")
    logs = [e for e in d.get_log("browser") if e["level"] == "SEVERE"]
    assert not logs, logs


def format_like_page(v) -> str:
    from jaxmodel.dashboard.app import _fmt

    return _fmt(float(v))


@pytest.mark.slow
def test_report_opens_offline_and_draws(driver, dataset, tmp_path, shots):
    path, size = write_report(dataset, tmp_path / "report.html")
    d = driver
    d.set_network_conditions(offline=True, latency=0, download_throughput=0,
                             upload_throughput=0)
    try:
        d.get(path.as_uri())
        n = wait_for(d, "var gs = document.querySelectorAll('.js-plotly-plot');"
                     "return gs.length && Array.from(gs).every(g => g._fullData && "
                     "g._fullData.length && g.querySelector('.main-svg')) ? gs.length : 0",
                     "the report's charts")
        assert n >= 4
        heat = d.execute_script("return document.querySelectorAll('.js-plotly-plot .hm')"
                                ".length")
        assert heat >= 2  # heatmaps drew their cells
        screenshot(d, shots / "report.png")
        logs = [e for e in d.get_log("browser") if e["level"] == "SEVERE"]
        assert not logs, logs
    finally:
        d.delete_network_conditions()


@pytest.mark.slow
def test_plan_view_draws_each_gpu_its_sizes_and_the_front(driver, tmp_path, shots):
    """A plan.parquet written here (as jaxmodel plan -o writes it), served as
    jaxmodel dashboard serves a plan directory: the page draws one trace per GPU
    with every size as a label on the chart, and the front is the plans no other
    beats in both time and cost (checked by brute force here)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from jaxmodel.dashboard.plan import build_plan_app

    plans = [("h100-sxm", 4096, 60.0, 10.0e6), ("h100-sxm", 8192, 46.0, 14.5e6),
             ("b200", 4096, 45.0, 12.0e6), ("b200", 8192, 25.0, 14.0e6),
             ("gb200-nvl72", 4096, 30.0, 16.0e6)]
    pq.write_table(pa.Table.from_pylist(
        [{"gpu": g, "num_gpus": n, "train_days": t, "cost_usd": c, "layout": "t8 p8"}
         for g, n, t, c in plans]), tmp_path / "plan.parquet")
    bg = Background(build_plan_app(tmp_path).server)
    try:
        d = driver
        d.get(bg.url)
        names = wait_for(d, "var g = document.querySelector('#plan-graph .js-plotly-plot');"
                         "return g && g.querySelector('.main-svg') && g.data ? "
                         "g.data.map(t => t.name) : null", "the plan chart")
        assert names == ["h100-sxm", "b200", "gb200-nvl72", "Pareto front"]
        labels = d.execute_script(
            "return Array.from(document.querySelectorAll('#plan-graph .textpoint text'))"
            ".map(e => e.textContent)")
        assert sorted(labels) == sorted(f"{n:,}" for _, n, _, _ in plans)
        front = d.execute_script(
            "var g = document.querySelector('#plan-graph .js-plotly-plot');"
            "var t = g.data[g.data.length - 1]; return t.x.map((x, i) => [x, t.y[i]])")
        want = sorted((t, c) for _, _, t, c in plans
                      if not any(t2 <= t and c2 <= c and (t2, c2) != (t, c)
                                 for _, _, t2, c2 in plans))
        assert sorted(map(tuple, front)) == want and len(want) == 3
        screenshot(d, shots / "dashboard_plan.png")
        logs = [e for e in d.get_log("browser") if e["level"] == "SEVERE"]
        assert not logs, logs
    finally:
        bg.stop()
