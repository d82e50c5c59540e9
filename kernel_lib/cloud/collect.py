"""`cloud collect`: each platform's report from the bucket (or a local folder) into
outputs/<platform>/, then those reports and the gallery rebuilt from their records, as
`python -m kernel_lib report` does. Only reports are replaced, each staged and swapped in
(kernel_lib.results.outdir.install), and only a gallery's index.html: everything is checked before
anything is copied. A report holding a symbolic link, a FIFO or a device is refused (one line
naming it, exit 2): a report is never copied through a link."""

from __future__ import annotations

import shlex
import subprocess
import tempfile
from pathlib import Path

from kernel_lib.cloud.tasks import BUCKET_SCHEMES, check_bucket
from kernel_lib.params import ParameterError
from kernel_lib.report.gallery import build_gallery, check_gallery
from kernel_lib.report.pages import rebuild_reports
from kernel_lib.report.read import report_folders
from kernel_lib.results.files import refuse_special
from kernel_lib.results.outdir import check_out, install
from kernel_lib.results.store import remember


def download(bucket: str, folder: Path) -> None:
    """Copy `bucket` (gs:// or s3://, checked: `tasks.check_bucket`) into `folder` with the command
    SkyPilot itself uses (gsutil rsync or aws s3 sync, installing gsutil if it is missing), both
    quoted: SkyPilot puts them into its shell line as they are."""
    from kernel_lib.cloud.jobs import require_sky  # SkyPilot: optional

    require_sky()
    from sky import cloud_stores

    storage = cloud_stores.get_storage_from_path(bucket)
    command = storage.make_sync_dir_command(shlex.quote(bucket), shlex.quote(str(folder)))
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
            download(check_bucket(source, "source"), folder)
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
        for report, target in zip(reports, targets):
            refuse_special(report)  # a link or a FIFO in a report: refused, nothing copied
            check_out(target)
        stored = []
        for report, target in zip(reports, targets):
            if target != report.resolve():  # collecting outputs/ itself: nothing to copy
                install(report, target)
            stored += remember(target)
    rebuilt = rebuild_reports(targets, outputs=outputs)  # read once, for pages and gallery
    return [r.index for r in rebuilt], build_gallery(outputs, rebuilt, stored)
