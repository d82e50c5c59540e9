"""`cloud collect`: each platform's report from the bucket (or a local folder) into
outputs/<platform>/, then those reports and the gallery rebuilt from their records, as
`python -m kernel_lib report` does. Only reports are replaced, each staged and swapped in
(kernel_lib.outdir.install), and only a gallery's index.html: everything is checked before
anything is copied."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from kernel_lib.cloud.tasks import BUCKET_SCHEMES
from kernel_lib.history.store import remember
from kernel_lib.outdir import check_out, install
from kernel_lib.params import ParameterError
from kernel_lib.report.gallery import build_gallery, check_gallery
from kernel_lib.report.pages import rebuild_reports
from kernel_lib.report.read import report_folders


def download(bucket: str, folder: Path) -> None:
    """Copy `bucket` (gs:// or s3://) into `folder` with the command SkyPilot itself uses (gsutil
    rsync or aws s3 sync, installing gsutil if it is missing)."""
    from kernel_lib.cloud.jobs import require_sky  # SkyPilot: optional

    require_sky()
    from sky import cloud_stores

    command = cloud_stores.get_storage_from_path(bucket).make_sync_dir_command(bucket, str(folder))
    if subprocess.run(["bash", "-c", command]).returncode != 0:
        raise ParameterError(f"could not copy {bucket} (see the error above): {command}")


def collect(
    source: str, outputs: Path, platforms: list[str] | None = None
) -> tuple[list[Path], Path]:
    """Copy every report folder (one with run.json) in `source`, a bucket URL or a local folder,
    of `platforms` (default all) to `outputs/<platform>/`, replacing the report there (a folder
    that is not a report, or an index.html that is not a gallery, is refused: ParameterError,
    nothing copied); rebuild those reports and `outputs/index.html`; add their runs to the results store. Returns the reports'
    index.html files and the gallery."""
    outputs = Path(outputs)
    if outputs.exists():  # before anything is downloaded or copied
        check_gallery(outputs, "--out")
    with tempfile.TemporaryDirectory(prefix="kernel-workbook-collect-") as tmp:
        if source.startswith(BUCKET_SCHEMES):
            folder = Path(tmp)
            download(source, folder)
        else:
            folder = Path(source)
            if not folder.is_dir():
                raise ParameterError(
                    f"{source!r} is neither a bucket URL ({', '.join(BUCKET_SCHEMES)}) nor a folder"
                )
        reports = [r for r in report_folders(folder) if platforms is None or r.name in platforms]
        if not reports:
            raise ParameterError(f"no finished report (<platform>/run.json) in {source}")
        targets = [outputs.resolve() / report.name for report in reports]
        for target in targets:
            check_out(target)
        for report, target in zip(reports, targets):
            if target != report.resolve():  # collecting outputs/ itself: nothing to copy
                install(report, target)
            remember(target)
    rebuilt = rebuild_reports(targets, outputs=outputs)  # read once, for pages and gallery
    return [r.index for r in rebuilt], build_gallery(outputs, rebuilt)
