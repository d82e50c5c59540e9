"""SkyPilot managed jobs, one per platform: launch, status, cancel. The only module that imports
`sky` (lazily, so the workbook's own environment runs without it)."""

from __future__ import annotations

from kernel_lib.cloud.tasks import JOB_PREFIX
from kernel_lib.params import ParameterError

SETUP_HINT = "run `make cloud-setup`, then `.venv-cloud/bin/python -m kernel_lib cloud ...`"


def require_sky():
    """The `sky` module; ParameterError (exit 2) naming `make cloud-setup` where it is absent."""
    try:
        import sky
    except ImportError:
        raise ParameterError(f"SkyPilot is not installed here: {SETUP_HINT}") from None
    return sky


def require_cloud(sky) -> list[str]:
    """The clouds SkyPilot may use; ParameterError naming `sky check` where there are none."""
    enabled = sky.get(sky.enabled_clouds())
    if not enabled:
        raise ParameterError(
            "no cloud is enabled for SkyPilot: run `.venv-cloud/bin/sky check` and set up the "
            "credentials it asks for"
        )
    return enabled


def launch(configs: dict[str, dict]) -> dict[str, str]:
    """Start one managed job per platform from its task config; platform -> outcome line. A
    platform that fails to launch (no cloud offers it, quota, ...) is reported and the others go on;
    capacity found later is SkyPilot's job recovery (spot preemption: retried elsewhere)."""
    sky = require_sky()
    require_cloud(sky)
    outcomes = {}
    for platform, config in configs.items():
        try:
            task = sky.Task.from_yaml_config(config)
            job_ids, _ = sky.stream_and_get(sky.jobs.launch(task, name=config["name"]))
            outcomes[platform] = f"launched: managed job {', '.join(map(str, job_ids or []))}"
        except Exception as err:  # any one platform's failure is its own: report it, go on
            first_line = (str(err).strip().splitlines() or [""])[0]
            outcomes[platform] = f"failed to launch: {type(err).__name__}: {first_line}"
    return outcomes


def platform_jobs(records, platforms: list[str] | None = None) -> dict[str, object]:
    """platform -> its latest managed job record (highest job id) among `records` (objects with
    job_id, job_name, status), for the workbook's jobs of `platforms` (default: all of them)."""
    latest = {}
    for record in sorted(records, key=lambda r: r.job_id or 0):
        name = record.job_name or ""
        platform = name[len(JOB_PREFIX) :] if name.startswith(JOB_PREFIX) else None
        if platform and (platforms is None or platform in platforms):
            latest[platform] = record
    return latest


def state(record) -> str:
    """A job record's status name (SUCCEEDED, RUNNING, FAILED_NO_RESOURCE, ...)."""
    status = record.status
    return getattr(status, "value", None) or str(status)


def _queue(sky) -> list:
    records, *_ = sky.get(sky.jobs.queue_v2(refresh=False, name_match=JOB_PREFIX))
    return records


def status(platforms: list[str] | None = None) -> dict[str, str]:
    """platform -> a line on its latest job: id, state, duration, failure reason."""
    sky = require_sky()
    lines = {}
    for platform, record in platform_jobs(_queue(sky), platforms).items():
        line = f"job {record.job_id}: {state(record)}"
        if record.job_duration:
            line += f" after {record.job_duration / 60:.0f} min"
        if record.failure_reason:
            line += f" ({record.failure_reason.strip().splitlines()[0]})"
        lines[platform] = line
    return lines


def down(platforms: list[str] | None = None) -> dict[str, str]:
    """Cancel the workbook's unfinished jobs (of `platforms`, default all); platform -> outcome."""
    sky = require_sky()
    running = {
        p: r
        for p, r in platform_jobs(_queue(sky), platforms).items()
        if not r.status.is_terminal()
    }
    if running:
        sky.get(sky.jobs.cancel(job_ids=[r.job_id for r in running.values()]))
    return {p: f"job {r.job_id}: cancelled" for p, r in running.items()}
