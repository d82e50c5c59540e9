"""examples/your_kernel.ipynb tested in JupyterLab as a person uses it: a JupyterLab server on a
free port (a random token, a copy of the notebook as its root, settings and workspaces of its
own), the notebook opened in headless Chromium, driven over the Chrome DevTools Protocol
(`Runtime.evaluate` on `window.jupyterapp`, which `--expose-app-in-browser` sets): it waits for
the project kernel (`kernel-workbook`, importing this checkout's kernel_lib), runs every cell
(`notebook:run-all-cells`, the Run All of the Run menu) and reads the plug-in's row from the
rendered output table. Skipped where Chromium is absent (CI installs it)."""

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from jupyter_client.kernelspec import KernelSpecManager

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "examples" / "your_kernel.ipynb"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
KERNEL = "kernel-workbook"
PLUGIN = "my_dispatch"  # the name the notebook registers its dispatch under
# JupyterLab settings a fresh profile would otherwise ask or fetch for: no news toast, and every
# cell attached to the page (the default windowing leaves cells out of view out of the DOM)
SETTINGS = {
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
}

websocket = pytest.importorskip("websocket", reason="websocket-client (jupyter_server's) absent")

pytestmark = [
    pytest.mark.slow,  # a JupyterLab server, a browser and a kernel
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium here (CI installs it)"),
]

# The notebook's panel among the main area's tabs (not `shell.currentWidget`: that follows the
# focus, which a headless window need not have).
PANEL = """[...jupyterapp.shell.widgets("main")].find(w =>
  w.context && w.context.path === NAME && w.sessionContext && w.model)""".replace(
    "NAME", json.dumps(NOTEBOOK.name)
)
# The open notebook's state: its kernel, each code cell's count, output types and errors.
STATE = """(() => {
  const w = window.jupyterapp && PANEL;
  if (!w) return null;
  const k = w.sessionContext.session && w.sessionContext.session.kernel;
  const cells = w.model.toJSON().cells.filter(c => c.cell_type === "code").map(c => ({
    count: c.execution_count, outputs: c.outputs.map(o => o.output_type),
    errors: c.outputs.filter(o => o.output_type === "error").map(o => o.ename + ": " + o.evalue),
  }));
  return {kernel: k ? k.name : null, status: k ? k.status : null,
    connection: k ? k.connectionStatus : null, cells, ran: window.__ran ?? null};
})()""".replace("PANEL", PANEL)
# What the kernel imports (this checkout's kernel_lib?) and its pid and group, for cleanup.
WHO = """(async () => {
  const kernel = PANEL.sessionContext.session.kernel;
  const future = kernel.requestExecute({store_history: false, code:
    "import os, kernel_lib; print(kernel_lib.__file__, os.getpid(), os.getpgid(0))"});
  let text = "";
  future.onIOPub = msg => { if (msg.header.msg_type === "stream") text += msg.content.text; };
  await future.done;
  return text;
})()""".replace("PANEL", PANEL)
# Run All (the Run menu's), on the notebook made the current tab as a click on it does.
RUN_ALL = """(() => {
  jupyterapp.shell.activateById(PANEL.id);
  window.__ran = null;
  jupyterapp.commands.execute("notebook:run-all-cells").then(
    ok => { window.__ran = {ok}; }, err => { window.__ran = {error: String(err)}; });
  return true;
})()""".replace("PANEL", PANEL)
# The rendered output areas as a person sees them: each table's rows by header, stderr shown.
OUTPUT = """(() => {
  const w = PANEL;
  const text = e => e.textContent.trim();
  const tables = [...w.node.querySelectorAll(".jp-OutputArea-output table")].map(t => {
    const head = [...t.querySelectorAll("thead tr:last-child th")].map(text);
    return [...t.querySelectorAll("tbody tr")].map(tr =>
      Object.fromEntries([...tr.children].map((c, i) => [head[i] || String(i), text(c)])));
  });
  const stderr = [...w.node.querySelectorAll(
    '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')].map(text);
  return {rows: tables.flat(), stderr};
})()""".replace("PANEL", PANEL)


class JsError(RuntimeError):
    """An exception in the page (or its context gone while it loads)."""


class DevTools:
    """One page of a Chromium, over its DevTools websocket: calls by id, events kept aside."""

    def __init__(self, url: str):
        self.ws = websocket.create_connection(url, timeout=30, suppress_origin=True)
        self.next_id, self.console = 0, []

    def call(self, method: str, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise JsError(f"{method}: {message['error']}")
                return message["result"]
            self._event(message)

    def _event(self, message: dict) -> None:
        params = message.get("params", {})
        if message.get("method") == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.console.append(details.get("exception", {}).get("description") or str(details))
        elif message.get("method") == "Runtime.consoleAPICalled" and params.get("type") == "error":
            self.console.append(
                " ".join(str(a.get("value", a.get("description"))) for a in params["args"])
            )

    def js(self, expression: str):
        result = self.call(
            "Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True
        )
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            raise JsError(details.get("exception", {}).get("description") or details.get("text"))
        return result["result"].get("value")

    def wait(self, expression: str, what: str, timeout: float, until=bool):
        """The first value of `expression` that `until` accepts, polled; TimeoutError naming
        `what` and the last value (or page error) seen."""
        deadline, last = time.monotonic() + timeout, None
        while True:
            try:
                last = self.js(expression)
                if until(last):
                    return last
            except JsError as err:  # the page still loading, or the app not there yet
                last = f"error: {err}"
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: not after {timeout:.0f} s; last seen: {last!r:.2000}")
            time.sleep(0.25)

    def close(self):
        try:
            self.ws.close()
        except Exception:  # noqa: BLE001 - the browser may be gone already
            pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(command: list[str], log: Path, **kw) -> subprocess.Popen:
    """`command` in its own process group (killed whole by `_stop`), output to `log`."""
    with log.open("wb") as out:
        return subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, **kw,
        )  # fmt: skip


def _stop(proc: subprocess.Popen | None, grace: float = 10) -> None:
    """SIGTERM to the process group of `proc`, SIGKILL after `grace` seconds."""
    if proc is None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(wait)
            break
        except subprocess.TimeoutExpired:
            continue
    try:  # the group's last members (a renderer) may outlive its leader
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _stop_kernel(pid: int | None, group: int | None) -> None:
    """The kernel the server started (its own session: the server's group does not hold it),
    where the server's shutdown left it running."""
    if pid is None:
        return
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    try:
        if group == pid:  # a group of its own: the kernel and whatever it started
            os.killpg(group, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _tail(path: Path, chars: int = 3000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"


def _wait_log(path: Path, pattern: str, proc: subprocess.Popen, timeout: float) -> re.Match:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := re.search(pattern, path.read_text(errors="replace")):
            return found
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    raise TimeoutError(f"{path.name}: no {pattern!r} (exit {proc.poll()}): {_tail(path)}")


def _wait_server(url: str, proc: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"jupyter lab exited {proc.returncode}: {_tail(log)}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"jupyter lab: {url} not up after {timeout:.0f} s: {_tail(log)}")


def _lab_environment(tmp: Path) -> dict:
    """The server's (and so the kernel's) environment: Jupyter's config, data and runtime
    folders of its own (the kernelspec is the venv's, --sys-prefix), this checkout first on the
    path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")}
    for name in ("CONFIG", "DATA", "RUNTIME"):
        (tmp / name.lower()).mkdir()
        env[f"JUPYTER_{name}_DIR"] = str(tmp / name.lower())
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


def _settings(folder: Path) -> Path:
    for name, values in SETTINGS.items():
        path = folder / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    return folder


def test_notebook_runs_in_jupyterlab(tmp_path):
    specs = KernelSpecManager().find_kernel_specs()
    assert KERNEL in specs, f"no {KERNEL} kernelspec ({sorted(specs)}): `make setup` registers it"
    assert json.loads(NOTEBOOK.read_text())["metadata"]["kernelspec"]["name"] == KERNEL

    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(NOTEBOOK, work / NOTEBOOK.name)
    port, token = _free_port(), secrets.token_hex(16)
    server_log, chrome_log = tmp_path / "jupyterlab.log", tmp_path / "chromium.log"
    server = chrome = page = None
    kernel_pid = kernel_group = None
    steps, started, dom = [], time.monotonic(), None

    def step(name):
        steps.append(f"{name} at {time.monotonic() - started:.1f} s")

    try:
        server = _start(
            [
                sys.executable, "-m", "jupyterlab", "--no-browser", "--expose-app-in-browser",
                "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
                "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
                f"--ServerApp.root_dir={work}",
                f"--LabApp.user_settings_dir={_settings(tmp_path / 'settings')}",
                f"--LabApp.workspaces_dir={tmp_path / 'workspaces'}",
                *(["--allow-root"] if os.geteuid() == 0 else []),  # a container's root
            ],
            server_log,
            env=_lab_environment(tmp_path),
            cwd=work,
        )  # fmt: skip
        chrome = _start(
            [
                CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--no-default-browser-check", "--disable-extensions",
                "--disable-background-networking", "--window-size=1280,2000",
                "--remote-debugging-port=0", f"--user-data-dir={tmp_path / 'chromium'}",
                "about:blank",
            ],
            chrome_log,
        )  # fmt: skip
        browser = _wait_log(chrome_log, r"DevTools listening on (ws://\S+)", chrome, 30).group(1)
        base = f"http://127.0.0.1:{port}"
        _wait_server(f"{base}/api/status?token={token}", server, server_log, 40)
        step("server up")
        devtools = re.match(r"ws://([^/]+)/", browser).group(1)
        with urllib.request.urlopen(f"http://{devtools}/json/list", timeout=10) as response:
            targets = json.load(response)
        page = DevTools(next(t for t in targets if t["type"] == "page")["webSocketDebuggerUrl"])
        page.call("Runtime.enable")
        page.call("Page.navigate", url=f"{base}/lab/tree/{NOTEBOOK.name}?token={token}")

        page.wait("window.jupyterapp !== undefined", "window.jupyterapp", 40)
        page.wait("jupyterapp.restored.then(() => true)", "the app restored", 30)
        step("app restored")
        state = page.wait(
            STATE,
            f"{NOTEBOOK.name} open with an idle {KERNEL} kernel",
            40,
            until=lambda s: (
                isinstance(s, dict) and s["status"] == "idle" and s["connection"] == "connected"
            ),
        )
        assert state["kernel"] == KERNEL, state
        step("kernel idle")
        kernel_file, kernel_pid, kernel_group = page.js(WHO).split()
        kernel_pid, kernel_group = int(kernel_pid), int(kernel_group)
        assert Path(kernel_file).resolve().is_relative_to(ROOT / "kernel_lib"), kernel_file

        page.js(RUN_ALL)
        state = page.wait(STATE, "Run All finished", 60, until=lambda s: bool(s and s["ran"]))
        step("cells ran")
        page.wait(
            STATE, "the kernel idle after Run All", 10, until=lambda s: s["status"] == "idle"
        )
        dom = page.js(OUTPUT)
        errors = [e for cell in state["cells"] for e in cell["errors"]]
        assert not errors, f"a cell raised: {errors}"
        assert state["ran"] == {"ok": True}, state["ran"]
        assert all(cell["count"] for cell in state["cells"]), f"a cell did not run: {state}"
        assert state["cells"][-1]["outputs"], f"the last cell shows nothing: {state}"
        shown = [t for t in dom["stderr"] if "Error" in t or "Traceback" in t]
        assert not shown, f"a cell shows an error: {shown}"
        rows = [r for r in dom["rows"] if r.get("implementation") == PLUGIN]
        assert rows, f"no {PLUGIN} row among the rendered tables' rows: {dom['rows']}"
        assert rows[0]["status"] == "ok", rows[0]
        assert float(rows[0]["ratio_vs_baseline"]) > 0, rows[0]
        assert any(r.get("implementation") == "dispatch_loop" for r in dom["rows"]), dom["rows"]
        step("plug-in row read")
        print("\n".join(steps))
    except BaseException:
        print(
            "steps:", "; ".join(steps) or "none", f"(failed at {time.monotonic() - started:.1f} s)"
        )
        if page is not None:
            try:
                text = page.js("document.body.innerText")
                print("page text (last 3000 characters):\n", (text or "")[-3000:])
            except Exception as err:  # noqa: BLE001 - diagnostics only
                print("page text unavailable:", err)
            print("page errors:", page.console[-10:])
        if dom is not None:
            print("rendered output:", json.dumps(dom)[:3000])
        print("jupyter lab log (tail):\n", _tail(server_log))
        print("chromium log (tail):\n", _tail(chrome_log, 1500))
        raise
    finally:
        if page is not None:
            page.close()
        _stop(chrome)
        _stop(server)
        _stop_kernel(kernel_pid, kernel_group)
