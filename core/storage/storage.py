"""A table's filesystem: every path is relative to the table's base path.

One interface over `pyarrow.fs` for local disks, S3, GCS and HDFS. The one operation
pyarrow does not offer, an atomic create-if-absent (used to complete timeline instants,
so that two committers can never both win), is implemented per scheme: a hard link of
a fully written temporary file on local disks, a conditional PUT (`If-None-Match: *`)
on S3. Other schemes fall back to check-then-write, which is only safe under the table
lock; a warning says so.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import posixpath
import re
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.fs as pafs

from lakeward.core.exceptions import ConfigError, InstantExistsError, LakewardError, StorageError
from lakeward.core.storage import read_cache, s3

log = logging.getLogger(__name__)
#: What an OSError of pyarrow's filesystems says when storage failed (S3 unreachable, a timeout), as
#: opposed to a file that is damaged, which Parquet's OSErrors are about.
_STORAGE_FAILURE = re.compile(r"AWS Error|curlCode|Could not connect|Connection refused|timed out", re.IGNORECASE)


def is_storage_failure(exc: BaseException) -> bool:
    """Whether `exc`, raised while reading a file, is storage failing (unreachable, denied, an I/O error)
    rather than the file's content: the file may well be sound, so it must not be reported damaged."""
    if isinstance(exc, StorageError):
        return True
    if not isinstance(exc, OSError) or isinstance(exc, FileNotFoundError):
        return False
    return exc.errno is not None or bool(_STORAGE_FAILURE.search(str(exc)))


@dataclass(frozen=True)
class FileEntry:
    """A file or directory found by a listing; `path` is relative to the base path."""

    path: str
    size: int
    is_dir: bool
    #: When the file was last written, as the listing gave it (aware; None: not given).
    modified: dt.datetime | None = None

    @property
    def name(self) -> str:
        return posixpath.basename(self.path)


class Storage:
    """Files of one table, addressed by paths relative to its base path."""

    def __init__(self, fs: pafs.FileSystem, root: str, uri: str, options: Mapping[str, str]):
        self.fs = fs
        self.root = root.rstrip("/") or "/"
        self.uri = uri
        self.options = dict(options)
        self._scheme = urlparse(uri).scheme or "file"
        if self._scheme not in ("file", "s3", "s3a"):
            log.warning(
                "storage scheme %r has no atomic create-if-absent; completing instants is "
                "safe only while a table lock serialises writers",
                self._scheme,
            )

    @classmethod
    def for_uri(cls, uri: str, options: Mapping[str, str] | None = None) -> Storage:
        """Open the filesystem that holds `uri` (a local path or a scheme URI)."""
        options = dict(options or {})
        parsed = urlparse(uri)
        if parsed.scheme and (parsed.query or parsed.fragment or uri.endswith(("?", "#"))):
            # A URI ends its path at `?` or `#`: the table would be written at the shorter path,
            # where another table of that name lives, and other readers would cut it there too.
            raise ConfigError(
                f"table path {uri!r} has a '?' or '#', which ends the path of a {parsed.scheme}:// URI: "
                "the table would be read and written at another path; choose a path without them"
            )
        if parsed.scheme in ("s3", "s3a"):
            options = s3.resolved_options(options)
            fs = s3.filesystem(options)
            root = f"{parsed.netloc}{parsed.path}".rstrip("/")
            return cls(fs, root, f"s3://{root}", options)
        if parsed.scheme in ("", "file"):
            local = os.path.abspath(parsed.path if parsed.scheme else uri)
            return cls(pafs.LocalFileSystem(), local, local, options)
        fs, root = pafs.FileSystem.from_uri(uri)
        return cls(fs, root, uri, options)

    # -- paths -----------------------------------------------------------------------------
    def full_path(self, rel: str) -> str:
        """The filesystem path of a path relative to the base path."""
        return posixpath.join(self.root, rel) if rel else self.root

    def uri_of(self, rel: str) -> str:
        return posixpath.join(self.uri, rel) if rel else self.uri

    @property
    def is_local(self) -> bool:
        return isinstance(self.fs, pafs.LocalFileSystem)

    # -- reading ---------------------------------------------------------------------------
    def exists(self, rel: str) -> bool:
        cache = read_cache.current()
        if cache is not None and read_cache.caches_file(full := self.full_path(rel)):
            return cache.file(full, lambda: self._read_if_exists(rel)) is not None
        return self._file_info(rel).type != pafs.FileType.NotFound

    def _file_info(self, rel: str) -> pafs.FileInfo:
        with self._failing_as("read information of", rel):
            return self.fs.get_file_info(self.full_path(rel))

    def read_bytes(self, rel: str) -> bytes:
        cache = read_cache.current()
        if cache is not None and read_cache.caches_file(full := self.full_path(rel)):
            data = cache.file(full, lambda: self._read_if_exists(rel))
            if data is None:
                raise FileNotFoundError(self.uri_of(rel))
            return data
        return self._read(rel)

    def _read_if_exists(self, rel: str) -> bytes | None:
        try:
            return self._read(rel)
        except FileNotFoundError:
            return None

    def _read(self, rel: str) -> bytes:
        try:
            with self.fs.open_input_stream(self.full_path(rel)) as f:
                return f.read()
        except (FileNotFoundError, NotADirectoryError):
            raise  # not there (a path under a regular file holds no file either)
        except OSError as exc:
            raise StorageError(f"cannot read {self.uri_of(rel)}: {exc}") from exc

    def missing_bucket(self) -> str | None:
        """The bucket of an S3 location that does not exist (None: it exists, or not S3): a typo in a
        bucket name otherwise reads as a table not created yet."""
        if self._scheme not in ("s3", "s3a"):
            return None
        bucket = self.root.split("/", 1)[0]
        try:
            found = self.fs.get_file_info(bucket).type != pafs.FileType.NotFound
        except OSError:  # cannot tell (denied, unreachable): say nothing more
            return None
        return None if found else bucket

    def open_input_file(self, rel: str) -> pa.NativeFile:
        try:
            return self.fs.open_input_file(self.full_path(rel))
        except (FileNotFoundError, NotADirectoryError):
            raise
        except OSError as exc:
            raise StorageError(f"cannot open {self.uri_of(rel)}: {exc}") from exc

    def size(self, rel: str) -> int:
        info = self._file_info(rel)
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(self.uri_of(rel))
        return int(info.size or 0)

    def modified_time(self, rel: str) -> dt.datetime:
        """When `rel` was last written (an aware datetime); FileNotFoundError when it does not exist."""
        info = self._file_info(rel)
        if info.type == pafs.FileType.NotFound or info.mtime is None:
            raise FileNotFoundError(self.uri_of(rel))
        moment = info.mtime
        return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)

    def list_dir(self, rel: str = "", recursive: bool = False) -> list[FileEntry]:
        """Entries under `rel` (missing directory: empty list), paths relative to the base."""
        cache = read_cache.current()
        if cache is not None and read_cache.caches_listing(full := self.full_path(rel), recursive):
            return cache.listing(full, lambda: self._list(rel, recursive), _sub_folders)
        return self._list(rel, recursive)

    def _list(self, rel: str, recursive: bool) -> list[FileEntry]:
        selector = pafs.FileSelector(self.full_path(rel), allow_not_found=True, recursive=recursive)
        prefix = self.root.rstrip("/") + "/"
        entries = []
        try:
            infos = self.fs.get_file_info(selector)
        except (FileNotFoundError, NotADirectoryError):
            raise
        except OSError as exc:
            raise StorageError(f"cannot list {self.uri_of(rel)}: {exc}") from exc
        for info in infos:
            path = info.path[len(prefix) :] if info.path.startswith(prefix) else info.path
            modified = info.mtime.astimezone(dt.UTC) if info.mtime is not None else None
            entries.append(FileEntry(path, int(info.size or 0), info.type == pafs.FileType.Directory, modified))
        return entries

    # -- writing ---------------------------------------------------------------------------
    @contextmanager
    def _failing_as(self, verb: str, rel: str) -> Iterator[None]:
        """Storage failing under a write, a delete or a file-information request (S3 unreachable or
        refusing, a full disk) raises StorageError naming the file, as reads do; "not there" and
        "exists already" pass."""
        try:
            yield
        except (FileNotFoundError, NotADirectoryError, FileExistsError, LakewardError):
            raise
        except OSError as exc:
            raise StorageError(f"cannot {verb} {self.uri_of(rel)}: {exc}") from exc

    def make_dirs(self, rel: str) -> None:
        with _changing(self.full_path(rel)), self._failing_as("create the folder", rel):
            self.fs.create_dir(self.full_path(rel), recursive=True)

    def write_bytes(self, rel: str, data: bytes) -> None:
        """Write (or replace) a whole file; readers never see a partial file on local disks."""
        full = self.full_path(rel)
        with _changing(full), self._failing_as("write", rel):
            if self.is_local:
                os.makedirs(os.path.dirname(full), exist_ok=True)
                tmp = self._temp_name(full)
                with open(tmp, "wb") as f:
                    f.write(data)
                os.replace(tmp, full)
                return
            with self.fs.open_output_stream(full) as f:
                f.write(data)

    def create_if_absent(self, rel: str, data: bytes) -> None:
        """Atomically create `rel` with `data`; raise InstantExistsError if it exists.

        Exactly one of several racing callers succeeds, and readers see either no file
        or the whole content.
        """
        with _changing(self.full_path(rel)), self._failing_as("create", rel):
            self._create_if_absent(rel, data)

    def _create_if_absent(self, rel: str, data: bytes) -> None:
        full = self.full_path(rel)
        if self.is_local:
            os.makedirs(os.path.dirname(full), exist_ok=True)
            tmp = self._temp_name(full)
            with open(tmp, "wb") as f:
                f.write(data)
            try:
                os.link(tmp, full)
            except FileExistsError:
                raise InstantExistsError(f"{self.uri_of(rel)} already exists") from None
            finally:
                os.unlink(tmp)
            return
        if self._scheme in ("s3", "s3a"):
            bucket, _, key = full.partition("/")
            try:
                created = s3.put_if_absent(self.options, bucket, key, data)
            except s3.S3ClientError as exc:  # botocore's: unreachable, timed out, refused
                unknown = (
                    " (the outcome is unknown: an attempt got no answer or a server error (5xx), so it may "
                    "have been created, or be created once a stalled server resumes; check before retrying)"
                    if exc.maybe_written
                    else ""
                )
                raise StorageError(f"cannot create {self.uri_of(rel)}{unknown}: {exc}") from exc
            if not created:
                raise InstantExistsError(f"{self.uri_of(rel)} already exists")
            return
        if self.fs.get_file_info(full).type != pafs.FileType.NotFound:
            raise InstantExistsError(f"{self.uri_of(rel)} already exists")
        with self.fs.open_output_stream(full) as f:
            f.write(data)

    @contextmanager
    def open_output_stream(self, rel: str) -> Iterator[pa.NativeFile]:
        """A stream that writes (or replaces) the whole file `rel`, for use in `with`.

        Readers never see a partial file, and a writer that dies leaves none under the name: on a
        local disk the stream writes a temporary file (`.<name>.<uuid>.tmp`, no data file name:
        orphan cleaning takes it) that takes the name when the block ends without an error; an
        object store makes an upload visible only once complete.
        """
        full = self.full_path(rel)
        if not self.is_local:
            with _changing(full), self._failing_as("write", rel), self.fs.open_output_stream(full) as stream:
                yield stream
            return
        tmp = self._temp_name(full)
        try:
            with self._failing_as("write", rel):
                os.makedirs(os.path.dirname(full), exist_ok=True)
                with self.fs.open_output_stream(tmp) as stream:
                    yield stream
                with _changing(full):
                    os.replace(tmp, full)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def delete_file(self, rel: str, missing_ok: bool = True) -> None:
        with _changing(self.full_path(rel)), self._failing_as("delete", rel):
            try:
                self.fs.delete_file(self.full_path(rel))
            except FileNotFoundError:
                if not missing_ok:
                    raise

    def delete_dir(self, rel: str) -> None:
        with _changing(self.full_path(rel)), self._failing_as("delete the folder", rel):
            try:
                self.fs.delete_dir(self.full_path(rel))
            except FileNotFoundError:
                pass

    @staticmethod
    def _temp_name(full: str) -> str:
        head, tail = os.path.split(full)
        return os.path.join(head, f".{tail}.{uuid.uuid4().hex}.tmp")


def _sub_folders(entries: list[FileEntry]) -> set[str]:
    return {e.name for e in entries if e.is_dir}


@contextmanager
def _changing(full_path: str) -> Iterator[None]:
    """Around a write or delete of `full_path`: afterwards (also after a failure, which may have
    changed it partly) the operations' read caches drop what it may have changed."""
    try:
        yield
    finally:
        read_cache.changed(full_path)
