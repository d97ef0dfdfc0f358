"""Finding, verifying and downloading the raw files behind each dataset.

A raw file is looked for, in order, under ``$RACO_BENCH_DATA`` and under the per-user cache
directory (``$XDG_CACHE_HOME/raco-bench/data``, else ``~/.cache/raco-bench/data``), at the same
relative path as in ``shared/data``. A file that is found must match its pinned sha256, or it is
refused. A file that is missing is downloaded into the cache directory (with the same checksum
check) unless ``RACO_BENCH_OFFLINE=1`` is set or the network is unreachable, in which case a
:class:`MissingDataError` says where it was looked for and how to obtain it.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

DATA_ENV = "RACO_BENCH_DATA"
OFFLINE_ENV = "RACO_BENCH_OFFLINE"
DOWNLOAD_TIMEOUT_S = 30.0


class DataError(RuntimeError):
    """Base class of the dataset errors (each message names the file and the fix)."""


class ChecksumMismatchError(DataError):
    """A raw file exists but its sha256 is not the pinned one."""


class MissingDataError(DataError):
    """A raw file is not present and could not be downloaded."""


@dataclass(frozen=True)
class RawFile:
    """One raw file of a dataset: where it lives (relative to a data root) and how to get it.

    ``archive_member`` names the member to extract when ``url`` points to a zip archive; the
    checksum is always that of the extracted file. ``sha256=None`` means no checksum is pinned
    (reported as "unverified", never silently as verified).
    """

    relpath: str
    sha256: str | None
    url: str | None
    archive_member: str | None = None
    how_to_obtain: str = ""


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "raco-bench" / "data"


def search_roots() -> list[Path]:
    roots: list[Path] = []
    env = os.environ.get(DATA_ENV)
    if env:
        roots.append(Path(env).expanduser())
    roots.append(cache_root())
    return roots


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


_VERIFIED: dict[tuple[str, int, int], str] = {}


def _cached_sha256(path: Path) -> str:
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _VERIFIED:
        _VERIFIED[key] = sha256_of(path)
    return _VERIFIED[key]


def verify(raw: RawFile, path: Path) -> bool:
    """Check ``path`` against the pinned sha256; return False when no checksum is pinned."""
    if raw.sha256 is None:
        return False
    actual = _cached_sha256(path)
    if actual != raw.sha256:
        raise ChecksumMismatchError(
            f"checksum mismatch for {path}: sha256 is {actual}, expected {raw.sha256}. "
            f"The file is corrupted or is a different version; delete it and obtain it again "
            f"({_obtain_hint(raw)})."
        )
    return True


def find(raw: RawFile) -> Path | None:
    """The first existing copy of ``raw`` under the search roots, or None."""
    for root in search_roots():
        candidate = root / raw.relpath
        if candidate.is_file():
            return candidate
    return None


def _obtain_hint(raw: RawFile) -> str:
    parts = []
    if raw.url:
        parts.append(f"download it from {raw.url}")
    if raw.how_to_obtain:
        parts.append(raw.how_to_obtain)
    parts.append(
        f"place it at <root>/{raw.relpath} with <root> = ${DATA_ENV} (e.g. a copy of shared/data) "
        f"or {cache_root()}"
    )
    return "; ".join(parts)


def offline() -> bool:
    return os.environ.get(OFFLINE_ENV, "").strip().lower() in {"1", "true", "yes"}


def _download(raw: RawFile, target: Path) -> None:
    """Fetch ``raw`` into ``target`` with pooch (streamed, then checked; extracted when it is a zip member).

    The pinned checksum is always that of the file the loaders read, so a plain file is checked by
    pooch itself and an archive member after extraction. Nothing reaches ``target`` unless it matches.
    """
    assert raw.url is not None
    created = [p for p in (target.parent, *target.parent.parents) if not p.exists()]  # removed again if the download fails
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        _fetch_into(raw, target)
    except BaseException:
        for folder in created:  # deepest first: a failed download leaves no empty cache folder behind
            try:
                folder.rmdir()
            except OSError:
                break
        raise


def _fetch_into(raw: RawFile, target: Path) -> None:
    import pooch

    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".download-") as tmp:
        if raw.archive_member is None:
            try:
                fetched = Path(pooch.retrieve(raw.url, known_hash=f"sha256:{raw.sha256}" if raw.sha256 else None,
                                              fname=target.name, path=tmp, downloader=_downloader()))
            except ValueError as exc:  # pooch's hash mismatch
                raise ChecksumMismatchError(_mismatch(raw, str(exc))) from None
        else:
            members = pooch.retrieve(raw.url, known_hash=None, path=tmp, downloader=_downloader(),
                                     processor=pooch.Unzip(members=[raw.archive_member], extract_dir="unzipped"))
            fetched = Path(members[0])
            actual = sha256_of(fetched)
            if raw.sha256 is not None and actual != raw.sha256:
                raise ChecksumMismatchError(_mismatch(raw, f"sha256 is {actual}, expected {raw.sha256}"))
        os.replace(fetched, target)


def _downloader():
    import pooch

    return pooch.HTTPDownloader(progressbar=False, timeout=DOWNLOAD_TIMEOUT_S)


def _mismatch(raw: RawFile, detail: str) -> str:
    return (f"checksum mismatch for the download of {raw.relpath} from {raw.url}: {detail}. Nothing was written; "
            "the upstream file changed or the download was corrupted.")


def ensure(raw: RawFile, download: bool = True) -> Path:
    """Return a verified local path of ``raw``, downloading it into the cache if allowed."""
    path = find(raw)
    if path is not None:
        verify(raw, path)
        return path
    looked = ", ".join(str(r / raw.relpath) for r in search_roots())
    if not download or offline() or raw.url is None:
        why = "offline mode" if offline() else "no download source" if raw.url is None else "download disabled"
        raise MissingDataError(
            f"missing data file {raw.relpath} (looked in: {looked}; {why}). To obtain it: "
            f"{_obtain_hint(raw)}."
        )
    target = cache_root() / raw.relpath
    try:
        _download(raw, target)
    except (OSError, TimeoutError) as exc:  # requests' errors (under pooch) are OSErrors
        raise MissingDataError(
            f"missing data file {raw.relpath} (looked in: {looked}) and the download from "
            f"{raw.url} failed ({exc}). To obtain it: {_obtain_hint(raw)}."
        ) from exc
    return target


@dataclass(frozen=True)
class FileStatus:
    raw: RawFile
    path: Path | None
    state: str  # "verified" | "unverified" | "missing" | "checksum mismatch"
    detail: str = ""


def status(raw: RawFile) -> FileStatus:
    """Where ``raw`` is and whether it verifies, without downloading anything."""
    path = find(raw)
    if path is None:
        return FileStatus(raw, None, "missing", "looked in " + ", ".join(str(r) for r in search_roots()))
    try:
        ok = verify(raw, path)
    except ChecksumMismatchError as exc:
        return FileStatus(raw, path, "checksum mismatch", str(exc))
    return FileStatus(raw, path, "verified" if ok else "unverified", "" if ok else "no pinned checksum")
