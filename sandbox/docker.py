"""DockerWorkspace: every tool runs inside a locked-down container.

One container per run, created from `[sandbox] image` with the configuration
in `sandbox.docker_container` (no network, read-only root, no capabilities,
non-root, limits) and started in a background thread at `open()`, so that it
comes up while the mode clones or fetches on the host. Methods wait for it.

The workspace is a host temp dir, as for LocalWorkspace, bind-mounted at
/workspace on a local engine or copied in and out on a remote one. Host-side
code never reads it: every method is one run of the helper script
(`sandbox.docker_helper`) inside the container, through a long-lived command
server (`sandbox.docker_channel`) or else a plain `docker exec`; the script
resolves paths inside the container, so a hostile symlink can only ever point
into the container's own filesystem.
"""

from __future__ import annotations

import io
import os
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from dispatcher.errors import SandboxError, ToolInputError, WorkspaceError
from sandbox import docker_helper as helper
from sandbox.docker_container import (
    CONTAINER_HOME,
    CONTAINER_PATH,
    SANDBOX_GID,
    SANDBOX_UID,
    STALE_AFTER_S,
    RunIdentity,
    container_environment,
    create_kwargs,
    reap,
)
from sandbox.docker_engine import (
    SSH_CHANNEL_LIMITS,
    connect,
    engine_errors,
    image_name,
    over_ssh,
    reason,
    require_image,
    translated,
    uses_bind_mount,
)
from sandbox.docker_channel import ChannelPool
from sandbox.docker_exec import EXEC_GRACE_S, ExecOutcome
from sandbox.environment import scrubbed_environment
from sandbox.workspace import (
    Command,
    CommandResult,
    Entry,
    ReadResult,
    MAX_WALK_ENTRIES,
    Workspace,
    check_path_syntax,
    remove_tree,
)

MAX_STDERR_BYTES = 64_000
# A listing of names longer than this is refused rather than shown in part
# (MAX_WALK_ENTRIES usually stops a walk first: this is for long paths).
MAX_LISTING_BYTES = 64_000_000
# `timeout -s KILL` ends a command this way; with the elapsed time it means "timed out".
KILLED_EXIT_CODE = 137
_KINDS = {b"f": "file", b"d": "dir", b"l": "symlink"}


class DockerWorkspace(Workspace):
    def __init__(self, mode: str, host_dir: Path, *, settings, client, image: str, identity: RunIdentity,
                 bind_mount: bool, uid: int, gid: int, docker_host: str | None, over_ssh_engine: bool) -> None:
        self.mode = mode
        self.host_dir = host_dir
        self._settings = settings
        self._client = client
        self._image = image
        self._identity = identity
        self._bind_mount = bind_mount
        self._uid, self._gid = uid, gid
        self._docker_host = docker_host
        self._container = None
        self._start_error: BaseException | None = None
        self._started = threading.Event()
        self._lock = threading.Lock()
        self._closed = False
        self._copy_back_note = ""
        self._copied_in_bytes = 0
        # Tool calls go through command servers in the container (one exec each
        # costs more than the call itself); see sandbox.docker_channel.
        # Only used once the container has started (after _running() or in _start).
        self._channels = ChannelPool(client.api, lambda: self._container.id, user=f"{uid}:{gid}",
                                     environment=container_environment(),
                                     **(SSH_CHANNEL_LIMITS if over_ssh_engine else {}))
        self._starter = threading.Thread(target=self._start, name=f"start {identity.container_name}", daemon=True)

    @classmethod
    def open(cls, mode: str, settings, environ: Mapping[str, str] = os.environ) -> "DockerWorkspace":
        """Check the engine and image now (cheap, and a failure should cost no
        clone), then create and start the container in the background."""
        client = connect(environ)
        try:
            image = image_name(settings)
            require_image(client, image)
            bind_mount = uses_bind_mount(settings, environ)
            host_dir = _make_host_dir(mode)
        except BaseException:
            client.close()
            raise
        uid, gid = _container_user(bind_mount)
        if bind_mount and os.getuid() == 0:
            # The sandbox user must reach the mounted directory before the tree
            # is handed over in after_prepare (web mode saves -u pages first);
            # root keeps owning it until then, so git on the host does not see
            # a repository of another user's. Its parent is root's alone, so no
            # host account that happens to hold the sandbox gid gets in.
            os.chown(host_dir, 0, gid)
            os.chmod(host_dir, 0o770)
        workspace = cls(mode, host_dir, settings=settings, client=client, image=image,
                        identity=RunIdentity.current(mode), bind_mount=bind_mount, uid=uid, gid=gid,
                        docker_host=environ.get("DOCKER_HOST"), over_ssh_engine=over_ssh(environ))
        try:
            workspace._starter.start()
        except BaseException:
            workspace.close()
            raise
        return workspace

    @property
    def container_id(self) -> str | None:
        """The container's id once it exists (for tests and messages)."""
        self._started.wait()
        return self._container.id if self._container is not None else None

    # -- the container -------------------------------------------------------
    def _start(self) -> None:
        try:
            kwargs = create_kwargs(self._settings, self._image, self._identity, user=f"{self._uid}:{self._gid}",
                                   bind_source=self.host_dir if self._bind_mount else None)
            with translated("create the sandbox container"):
                self._container = self._client.containers.create(**kwargs)
            try:
                self._container.start()
            except engine_errors() as exc:
                raise SandboxError(f"the sandbox container failed to start: {reason(exc)}") from exc
            # Before the container counts as started, so that the first tool
            # call finds a server ready rather than racing to open a second.
            self._channels.warm()
        except BaseException as exc:  # handed to the thread that next needs the container
            self._start_error = exc
        finally:
            self._started.set()
        if self._start_error is None:
            self._reap_stale()

    def _reap_stale(self) -> None:
        try:
            reap(self._client, min_age_s=STALE_AFTER_S, remove_foreign=True)
        except engine_errors():
            pass  # housekeeping only: the next run tries again

    def _running(self):
        self._started.wait()
        if self._start_error is not None:
            raise self._start_error
        if self._closed:
            raise WorkspaceError("the workspace is already closed")
        return self._container

    def _exec(self, argv: list[str], *, environment: Mapping[str, str], deadline_s: float,
              max_stdout_bytes: int, want_exit_code: bool = True) -> ExecOutcome:
        # Both paths run from "/": the helper works with absolute paths and
        # `run` changes directory itself, after checking where it goes.
        self._running()  # waits for the container, or raises why it did not start
        return self._channels.run(argv, environment=environment, deadline_s=deadline_s,
                                  max_stdout_bytes=max_stdout_bytes, max_stderr_bytes=MAX_STDERR_BYTES,
                                  want_exit_code=want_exit_code)

    def _helper(self, op: str, *args: str, max_stdout_bytes: int = 1_000_000,
                listing: bool = False) -> tuple[int | None, bytes]:
        """Run one helper operation; (status code, None) or (None, payload).
        A `listing` cut short by `max_stdout_bytes` is refused, not returned
        in part as if it were whole."""
        limit_s = self._settings.exec_timeout_s
        argv = ["timeout", "-s", "KILL", str(limit_s), *helper.argv(op, *args)]
        # The reply says how it went; the exit code is not worth another API call.
        outcome = self._exec(argv, environment=container_environment(), deadline_s=limit_s + EXEC_GRACE_S,
                             max_stdout_bytes=max_stdout_bytes, want_exit_code=False)
        if outcome.deadline_passed or outcome.elapsed_s >= limit_s:
            # Killed part-way by `timeout`: whatever arrived is incomplete.
            raise SandboxError(f"the sandbox's {op} command timed out after {limit_s} s")
        if listing and outcome.stdout_overflowed:
            raise ToolInputError(f"{args[0]!r} holds more than can be listed at once (over "
                                 f"{max_stdout_bytes:,} bytes of names); look in a subdirectory")
        try:
            return helper.split_reply(outcome.stdout)
        except ValueError:
            raise SandboxError(f"the sandbox's {op} command failed: {_first_line(outcome.stderr)}") from None

    # -- paths ---------------------------------------------------------------
    def resolve(self, path: str) -> str:
        code, payload = self._helper("resolve", check_path_syntax(path))
        if code is not None:
            raise _refusal(code, path, "resolve")
        return helper.relative(payload)

    # -- files ---------------------------------------------------------------
    def read_bytes(self, path: str, max_bytes: int, offset: int = 0) -> ReadResult:
        checked = check_path_syntax(path)
        if offset < 0:
            raise ToolInputError("offset must not be negative")
        max_bytes = max(max_bytes, 0)
        code, payload = self._helper("read", checked, str(offset), str(max_bytes),
                                     max_stdout_bytes=max_bytes + 64)
        if code is not None:
            raise _refusal(code, path, "read")
        size, _, data = payload.partition(b"\n")
        data = data[:max_bytes]
        return ReadResult(data=data, size=int(size), truncated=offset + len(data) < int(size))

    def list_dir(self, path: str = ".") -> list[Entry]:
        code, payload = self._helper("list", check_path_syntax(path), max_stdout_bytes=MAX_LISTING_BYTES,
                                     listing=True)
        if code is not None:
            raise _refusal(code, path, "list")
        return sorted(_entries(payload), key=lambda entry: entry.path)

    def walk(self, path: str = ".") -> Iterator[Entry]:
        code, payload = self._helper("walk", check_path_syntax(path), str(MAX_WALK_ENTRIES + 1),
                                     max_stdout_bytes=MAX_LISTING_BYTES, listing=True)
        if code is not None:
            raise _refusal(code, path, "walk")
        yield from _depth_first(payload)

    def write_bytes(self, path: str, data: bytes) -> str:
        code, payload = self._helper("parent", check_path_syntax(path))
        if code is not None:
            raise _refusal(code, path, "write")
        directory, _, name = os.fsdecode(payload).rpartition("/")
        member = tarfile.TarInfo(name)
        member.size, member.mode = len(data), 0o644
        member.uid, member.gid = self._uid, self._gid
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            tar.addfile(member, io.BytesIO(data))
        give_up = time.monotonic() + self._settings.exec_timeout_s
        with self._channels.exec_slot(give_up) as has_slot, translated(f"write {path!r} into the sandbox container"):
            if not has_slot:
                raise ToolInputError(f"cannot save {path!r} now: the sandbox is busy with other calls; call again")
            self._running().put_archive(directory, archive.getvalue())
        return helper.relative(payload)

    # -- programs ------------------------------------------------------------
    def run(self, command: Command) -> CommandResult:
        cwd = check_path_syntax(command.cwd)
        program = command.argv[0]
        if any("\x00" in arg for arg in command.argv):
            raise WorkspaceError(f"cannot run {program}: an argument contains a NUL byte")
        limit_s = min(command.timeout_s, self._settings.exec_timeout_s)
        # Rebuilt from the same allowlist as LocalWorkspace's, with the container's PATH.
        env = scrubbed_environment(home=CONTAINER_HOME, source={})
        env["PATH"] = CONTAINER_PATH
        env.update(command.env)
        outcome = self._exec(helper.argv("run", cwd, f"{limit_s:g}", *command.argv), environment=env,
                             deadline_s=limit_s + EXEC_GRACE_S,
                             # One byte more for the helper's leading 'O'.
                             max_stdout_bytes=command.max_output_bytes + 1)
        stdout = outcome.stdout
        if stdout[:1] == b"E" and stdout[1:].isdigit():
            code = int(stdout[1:])
            if code == helper.NO_PROGRAM:
                raise WorkspaceError(f"{program} is not installed or not on PATH")
            if code == helper.NOT_DIRECTORY:
                raise WorkspaceError(f"cannot run {program}: {command.cwd!r} is not a directory")
            raise _refusal(code, command.cwd, "run in")
        timed_out = _timed_out(outcome, limit_s)
        if stdout[:1] != b"O" and not timed_out:
            raise SandboxError(f"cannot run {program} in the sandbox container: {_first_line(outcome.stderr)}")
        exit_code = outcome.exit_code if outcome.exit_code is not None else KILLED_EXIT_CODE
        return CommandResult(exit_code=exit_code, stdout=stdout[1:], stderr=outcome.stderr,
                             timed_out=timed_out, truncated=outcome.stdout_overflowed)

    # -- lifetime ------------------------------------------------------------
    def after_prepare(self) -> None:
        if self._bind_mount:
            if os.getuid() == 0:
                _hand_over(self.host_dir, self._uid, self._gid)
                os.chmod(self.host_dir, 0o700)
            # The model is called next: a container that failed to start must
            # stop the run now, not after a paid model call (or never, if the
            # model answers without a tool).
            self._running()
            return
        from sandbox.docker_transfer import copy_in

        self._copied_in_bytes = copy_in(self._running(), self.host_dir, self._uid, self._gid)

    def close(self, keep: bool = False) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._starter.is_alive() or self._starter.ident is not None:
            # A container still being created must not escape removal, and
            # the reaping that follows must finish before the client closes.
            self._starter.join()
        self._channels.close()
        try:
            if keep:
                self._keep()
            else:
                self._remove()
        finally:
            self._client.close()

    def _keep(self) -> None:
        if self._bind_mount or self._container is None:
            return
        from sandbox.docker_transfer import copy_back_limit, copy_out

        # Failing here would lose the kept container's address too: say it instead.
        try:
            refused = copy_out(self._container, self.host_dir, copy_back_limit(self._copied_in_bytes))
        except (SandboxError, OSError) as exc:
            self._copy_back_note = f"could not copy the workspace back ({exc}); it is still in the container"
            return
        if refused:
            self._copy_back_note = (f"{len(refused)} entries stayed in the container (links, special files, "
                                    f"or files past the size limit), e.g. {refused[0]}")

    def _remove(self) -> None:
        import docker

        problems = []
        if self._container is not None:
            try:
                self._container.remove(force=True, v=True)
            except docker.errors.NotFound:
                pass
            except engine_errors() as exc:
                problems.append(f"container {self._container.short_id} ({reason(exc)})")
        if not remove_tree(self.host_dir.parent):
            problems.append(f"directory {self.host_dir.parent}")
        if problems:
            raise SandboxError(f"could not remove the sandbox {' and '.join(problems)}")

    def kept_message(self) -> str:
        lines = [f"workspace kept at {self.host_dir}"]
        if self._copy_back_note:
            lines.append(self._copy_back_note)
        if self._container is not None:
            engine = f"DOCKER_HOST={self._docker_host} " if self._docker_host else ""
            lines.append(f"open a shell in its container: {engine}docker exec -it {self._container.short_id} sh")
            lines.append("remove it later with: research sandbox prune")
        return "\n".join(lines)


def _make_host_dir(mode: str) -> Path:
    """<tmp>/research-<mode>-XXXX/workspace: the parent is 0700 and ours, so
    only we (and the container, through the mount) ever reach the workspace,
    whatever owner and mode it gets for the container's sake."""
    try:
        host_dir = Path(tempfile.mkdtemp(prefix=f"research-{mode}-")) / "workspace"
        host_dir.mkdir(mode=0o700)
    except OSError as exc:
        raise WorkspaceError(f"cannot create a workspace under {tempfile.gettempdir()}: {exc.strerror}") from exc
    return host_dir


def _container_user(bind_mount: bool) -> tuple[int, int]:
    """Who runs in the container: the sandbox user, or the host user when that
    is not root and shares the workspace through a bind mount (so the files
    stay theirs)."""
    if bind_mount and os.getuid() != 0:
        return os.getuid(), os.getgid()
    return SANDBOX_UID, SANDBOX_GID


def _hand_over(root: Path, uid: int, gid: int) -> None:
    from sandbox.docker_transfer import hand_over

    hand_over(root, uid, gid)


def _refusal(code: int, path: str, action: str) -> ToolInputError:
    if code == helper.OUTSIDE:
        return ToolInputError(f"{path!r} is outside the workspace")
    if code == helper.MISSING:
        return ToolInputError(f"{path!r} does not exist")
    if code == helper.IS_DIRECTORY:
        hint = "; use ls to list it" if action == "read" else ""
        return ToolInputError(f"{path!r} is a directory{hint}")
    if code == helper.NOT_REGULAR:
        return ToolInputError(f"{path!r} is not a regular file")
    if code == helper.NOT_DIRECTORY:
        return ToolInputError(f"{path!r} is not a directory")
    return ToolInputError(f"cannot {action} {path!r}: permission denied or unresolvable")


def _timed_out(outcome: ExecOutcome, limit_s: float) -> bool:
    return outcome.deadline_passed or (outcome.exit_code == KILLED_EXIT_CODE and outcome.elapsed_s >= limit_s)


def _records(payload: bytes) -> list[bytes]:
    """The complete "<type> <size> <path>" records of find's output; the last
    piece is empty, or cut short by the output cap."""
    return payload.split(b"\x00")[:-1]


def _entry(record: bytes) -> Entry:
    kind, size, real = record.split(b" ", 2)
    entry_kind = _KINDS.get(kind, "other")
    return Entry(path=helper.relative(real), kind=entry_kind, size=int(size) if entry_kind == "file" else 0)


def _entries(payload: bytes) -> list[Entry]:
    return [_entry(record) for record in _records(payload)]


def _depth_first(payload: bytes) -> Iterator[Entry]:
    """LocalWorkspace.walk's order: a directory's entries by name, then each
    subdirectory's, depth first. Entries are made as they are yielded, so a
    walk of half a million holds records (bytes), not objects, for each."""
    children: dict[bytes, list[bytes]] = {}
    for record in _records(payload):
        real = record.split(b" ", 2)[2]
        children.setdefault(real.rpartition(b"/")[0], []).append(record)
    if not children:
        return
    top = min(children, key=len)  # the walked directory: every other parent is below it
    stack = [top]
    while stack:
        listing = children.pop(stack.pop(), [])
        listing.sort(key=lambda record: os.fsdecode(record.rpartition(b"/")[2]))
        subdirectories = []
        for record in listing:
            yield _entry(record)
            if record.startswith(b"d "):
                subdirectories.append(record.split(b" ", 2)[2])
        stack.extend(reversed(subdirectories))


def _first_line(stderr: bytes) -> str:
    lines = stderr.decode("utf-8", "replace").strip().splitlines()
    return lines[0] if lines else "no message"
