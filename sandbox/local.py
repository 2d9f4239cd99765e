"""LocalWorkspace: a temp dir on the host, `research-<mode>-*` under $TMPDIR.

Containment is a security boundary here, not a convenience: every path is
resolved against the root *after* following symlinks, and files are opened
without following a final symlink and re-checked through /proc after opening,
so a link swapped in between the check and the open still cannot escape.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from dispatcher.errors import ToolInputError, WorkspaceError
from sandbox.environment import scrubbed_environment
from sandbox.workspace import (
    CappedBuffer,
    Command,
    CommandResult,
    Entry,
    ReadResult,
    Workspace,
    check_path_syntax,
    remove_tree,
)

# Tools get no home directory of their own: nothing there to read or to write.
TOOL_HOME = "/nonexistent"
MAX_STDERR_BYTES = 64_000
_READ_CHUNK_BYTES = 65_536
# How long a command's output may stay open after it exits and its group is
# killed (a child that left the group holding it): then the call ends with
# what arrived, as in the Docker backend.
DRAIN_S = 2.0


class LocalWorkspace(Workspace):
    def __init__(self, mode: str, root: Path) -> None:
        self.mode = mode
        self.host_dir = root
        self._root = os.path.realpath(root)
        self._processes: set[subprocess.Popen] = set()
        self._lock = threading.Lock()
        self._closed = False

    @classmethod
    def open(cls, mode: str) -> "LocalWorkspace":
        try:
            root = tempfile.mkdtemp(prefix=f"research-{mode}-")
        except OSError as exc:
            raise WorkspaceError(f"cannot create a workspace under {tempfile.gettempdir()}: {exc.strerror}") from exc
        return cls(mode, Path(root))

    # -- paths ---------------------------------------------------------------
    def resolve(self, path: str) -> str:
        return os.path.relpath(self._real(path), self._root)

    def _real(self, path: str) -> str:
        """The host path `path` designates, after symlinks, proven to be inside."""
        check_path_syntax(path)
        real = os.path.realpath(os.path.join(self._root, path or "."))
        self._check_inside(real, path)
        return real

    def _check_inside(self, real: str, shown: str) -> None:
        # Compare whole path components: "<root>2" must not pass as inside "<root>".
        if real != self._root and not real.startswith(self._root + os.sep):
            raise ToolInputError(f"{shown!r} is outside the workspace")

    def _relative(self, real: str) -> str:
        return os.path.relpath(real, self._root).replace(os.sep, "/")

    # -- files ---------------------------------------------------------------
    def read_bytes(self, path: str, max_bytes: int, offset: int = 0) -> ReadResult:
        real = self._real(path)
        try:
            # O_NONBLOCK: a FIFO planted in the tree must not hang the read.
            fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            raise ToolInputError(f"{path!r} does not exist") from None
        except OSError as exc:
            raise ToolInputError(f"cannot read {path!r}: {exc.strerror}") from None
        try:
            info = os.fstat(fd)
            if stat.S_ISDIR(info.st_mode):
                raise ToolInputError(f"{path!r} is a directory; use ls to list it")
            if not stat.S_ISREG(info.st_mode):
                raise ToolInputError(f"{path!r} is not a regular file")
            # The file actually opened, whatever happened to the path meanwhile.
            self._check_inside(os.readlink(f"/proc/self/fd/{fd}"), path)
            data = os.pread(fd, max_bytes, offset) if max_bytes > 0 else b""
        finally:
            os.close(fd)
        return ReadResult(data=data, size=info.st_size, truncated=offset + len(data) < info.st_size)

    def _open_directory(self, real: str, shown: str, missing: str = "does not exist") -> tuple[int, str]:
        """A descriptor on the directory at `real` and the path it really opened,
        proven inside: a directory swapped for a link after `_real` is caught."""
        try:
            fd = os.open(real, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            raise ToolInputError(f"{shown!r} {missing}") from None
        except NotADirectoryError:
            raise ToolInputError(f"{shown!r} is not a directory") from None
        except OSError as exc:
            raise ToolInputError(f"cannot list {shown!r}: {exc.strerror}") from None
        try:
            opened = os.readlink(f"/proc/self/fd/{fd}")
            self._check_inside(opened, shown)
        except BaseException:
            os.close(fd)
            raise
        return fd, opened

    def _listing(self, real: str, shown: str, missing: str = "does not exist") -> list[Entry]:
        fd, opened = self._open_directory(real, shown, missing)
        try:
            with os.scandir(fd) as entries:
                return sorted((self._entry(e, opened) for e in entries), key=lambda e: e.path)
        except OSError as exc:
            raise ToolInputError(f"cannot list {shown!r}: {exc.strerror}") from None
        finally:
            os.close(fd)

    def list_dir(self, path: str = ".") -> list[Entry]:
        return self._listing(self._real(path), path)

    def walk(self, path: str = ".") -> Iterator[Entry]:
        # The Docker backend words a missing start the same way.
        entries = self._listing(self._real(path), path, missing="is not a directory")
        stack: list[str] = []
        while True:
            subdirectories = []
            for entry in entries:
                if entry.kind == "dir" and entry.path.rsplit("/", 1)[-1] == ".git":
                    continue
                yield entry
                if entry.kind == "dir":
                    subdirectories.append(entry.path)
            stack.extend(reversed(subdirectories))
            entries = None
            while entries is None:
                if not stack:
                    return
                directory = stack.pop()
                try:
                    entries = self._listing(os.path.join(self._root, directory), directory)
                except ToolInputError:
                    pass  # unreadable, or swapped for a link meanwhile: skip it, as find(1) would

    def _entry(self, dir_entry: os.DirEntry, directory: str) -> Entry:
        info = dir_entry.stat(follow_symlinks=False)
        if stat.S_ISLNK(info.st_mode):
            kind = "symlink"
        elif stat.S_ISDIR(info.st_mode):
            kind = "dir"
        elif stat.S_ISREG(info.st_mode):
            kind = "file"
        else:
            kind = "other"
        path = self._relative(os.path.join(directory, dir_entry.name))
        return Entry(path=path, kind=kind, size=info.st_size if kind == "file" else 0)

    def write_bytes(self, path: str, data: bytes) -> str:
        # Under the lock close() takes: a tool call still running when the run
        # ends (an interrupt does not wait for it) must not create the removed
        # workspace again.
        with self._lock:
            if self._closed:
                raise WorkspaceError(f"cannot write {path!r}: the workspace is closed")
            return self._write(path, data)

    def _write(self, path: str, data: bytes) -> str:
        real = self._real(path)
        parent, name = os.path.split(real)
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError as exc:
            raise ToolInputError(f"cannot create the directory for {path!r}: {exc.strerror}") from None
        # Create the file relative to a descriptor on its directory, proven
        # inside, so no link swapped into the path meanwhile can redirect it.
        directory_fd, _ = self._open_directory(parent, path)
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                         dir_fd=directory_fd)
        except OSError as exc:
            raise ToolInputError(f"cannot write {path!r}: {exc.strerror}") from None
        finally:
            os.close(directory_fd)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        return self._relative(real)

    # -- programs ------------------------------------------------------------
    def run(self, command: Command) -> CommandResult:
        cwd = self._real(command.cwd)
        env = scrubbed_environment(home=TOOL_HOME, extra=command.env)
        executable = shutil.which(command.argv[0], path=env["PATH"])
        if executable is None:
            raise WorkspaceError(f"{command.argv[0]} is not installed or not on PATH")
        try:
            process = subprocess.Popen(
                [executable, *command.argv[1:]],
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                # Its own process group, so a timeout kills everything it spawned.
                start_new_session=True,
            )
        except OSError as exc:
            raise WorkspaceError(f"cannot run {command.argv[0]}: {exc.strerror}") from exc
        with self._lock:
            self._processes.add(process)
        try:
            return _collect(process, command)
        finally:
            with self._lock:
                self._processes.discard(process)

    # -- lifetime ------------------------------------------------------------
    def close(self, keep: bool = False) -> None:
        with self._lock:
            processes, self._processes = list(self._processes), set()
            already_closed, self._closed = self._closed, True
        for process in processes:
            _kill_group(process)
        if keep or already_closed:
            return
        if not remove_tree(self._root):
            raise WorkspaceError(f"could not remove the workspace at {self._root}")


def _collect(process: subprocess.Popen, command: Command) -> CommandResult:
    """Wait for `process`, keeping at most the capped output, killing it at the timeout."""
    stdout = _CappedReader(process.stdout, command.max_output_bytes)
    stderr = _CappedReader(process.stderr, MAX_STDERR_BYTES)
    timed_out = False
    try:
        process.wait(timeout=command.timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(process)
        process.wait()
    # Whatever it left running in its group dies with it, so nothing a tool
    # started outlives the call (nor holds its output open).
    _kill_group(process)
    drained_by = time.monotonic() + DRAIN_S
    stdout.join(max(drained_by - time.monotonic(), 0))
    stderr.join(max(drained_by - time.monotonic(), 0))
    return CommandResult(
        exit_code=process.returncode,
        stdout=stdout.data(),
        stderr=stderr.data(),
        timed_out=timed_out,
        truncated=stdout.overflowed,
    )


class _CappedReader(threading.Thread):
    """Drains a pipe into a CappedBuffer, so the process never blocks on a full pipe."""

    def __init__(self, pipe, cap: int) -> None:
        super().__init__(daemon=True)
        self._pipe = pipe
        self._buffer = CappedBuffer(cap)
        self.start()

    def run(self) -> None:
        with self._pipe:
            while chunk := self._pipe.read1(_READ_CHUNK_BYTES):
                self._buffer.add(chunk)

    @property
    def overflowed(self) -> bool:
        return self._buffer.overflowed

    def data(self) -> bytes:
        return self._buffer.data()


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
