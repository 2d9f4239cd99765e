"""One `docker exec` of an argv, read with a deadline and capped output.

The SDK's own stream reader polls without a timeout, so a process that leaves
a grandchild holding stdout open would hang the caller for ever; and its raw
socket skips whatever the HTTP layer had already buffered past the upgrade
response (over TCP the first frames often arrive in the same packet). So we
start the exec ourselves, as `APIClient.exec_start` does, and read the
multiplexed frames from the response's buffered reader, with a deadline on
every receive, keeping only the first bytes of each stream.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Mapping, Sequence

import attrs

from dispatcher.errors import SandboxError
from sandbox.docker_engine import reason, translated
from sandbox.workspace import CappedBuffer

# Beyond the in-container `timeout`: time for the engine to report the kill.
EXEC_GRACE_S = 5.0
# Once the output has ended, how long the engine may take to publish the exit code.
EXIT_CODE_WAIT_S = 5.0
_EXIT_CODE_POLL_S = 0.005
_RECV_BYTES = 65_536
_FRAME_HEADER = struct.Struct(">BxxxL")
_STDOUT, _STDERR = 1, 2


@attrs.frozen
class ExecOutcome:
    exit_code: int | None  # None when the deadline passed before the process ended
    stdout: bytes
    stderr: bytes
    stdout_overflowed: bool
    deadline_passed: bool
    elapsed_s: float


def exec_argv(
    api,
    container_id: str,
    argv: Sequence[str],
    *,
    user: str,
    workdir: str,
    environment: Mapping[str, str],
    deadline_s: float,
    max_stdout_bytes: int,
    max_stderr_bytes: int,
    want_exit_code: bool = True,
) -> ExecOutcome:
    """Run `argv` in the container and collect what it leaves behind.

    Without `want_exit_code` the exit code is not asked for (one API call
    less) and reported as None.

    Raises SandboxError only when the engine cannot run it at all (the
    container is gone, the engine is unreachable).
    """
    started = time.monotonic()
    with translated("run a command in the sandbox container"):
        exec_id = api.exec_create(
            container_id, list(argv), stdout=True, stderr=True, stdin=False, tty=False,
            user=user, workdir=workdir, environment=dict(environment),
        )["Id"]
        response = start_exec(api, exec_id)
    frames = FrameReader(response, deadline=started + deadline_s)
    stdout = CappedBuffer(max_stdout_bytes)
    stderr = CappedBuffer(max_stderr_bytes)
    try:
        for kind, data in frames:
            (stderr if kind == _STDERR else stdout).add(data)
    except OSError as exc:
        raise SandboxError(f"lost the connection to the sandbox container: {reason(exc)}") from exc
    finally:
        try:
            response.close()
        except (OSError, ValueError):
            pass  # already closed by the engine hanging up
    exit_code = _exit_code(api, exec_id) if want_exit_code and not frames.deadline_passed else None
    return ExecOutcome(
        exit_code=exit_code,
        stdout=stdout.data(),
        stderr=stderr.data(),
        stdout_overflowed=stdout.overflowed,
        deadline_passed=frames.deadline_passed,
        elapsed_s=time.monotonic() - started,
    )


def start_exec(api, exec_id: str):
    """POST /exec/{id}/start, upgraded to a raw stream, as the SDK's exec_start
    does; the response reads the exec's frames (see FrameReader)."""
    response = api._post_json(
        api._url("/exec/{0}/start", exec_id),
        headers={"Connection": "Upgrade", "Upgrade": "tcp"},
        data={"Tty": False, "Detach": False},
        stream=True,
    )
    api._raise_for_status(response)
    return response


class FrameReader:
    """Reads (stream, bytes) frames of a non-tty exec until EOF or `deadline`
    (a time.monotonic() value the caller may move), and writes to its stdin."""

    def __init__(self, response, deadline: float) -> None:
        # The buffered reader holds any bytes read past the HTTP headers.
        self._reader = response.raw._fp.fp
        raw = getattr(self._reader, "raw", self._reader)
        # The object whose timeout bounds a receive and that takes writes: the
        # socket under a SocketIO, the SSL socket itself, or the SSH channel
        # under paramiko's file (ssh:// engines).
        self._socket = getattr(raw, "_sock", None) or getattr(self._reader, "channel", None) or raw
        self.deadline = deadline
        self._buffer = b""
        self._kind = _STDOUT
        self._left = 0  # bytes of the current frame not yet returned
        self.deadline_passed = False

    def __iter__(self):
        while (frame := self.next_frame()) is not None:
            yield frame

    def next_frame(self) -> tuple[int, bytes] | None:
        """The next piece of a frame's payload; None at EOF or past the deadline."""
        while self._left == 0:
            header = self._read_exactly(_FRAME_HEADER.size)
            if header is None:
                return None
            self._kind, self._left = _FRAME_HEADER.unpack(header)
        chunk = self._read_some(min(self._left, _RECV_BYTES))
        if chunk is None:
            return None
        self._left -= len(chunk)
        return self._kind, chunk

    @property
    def can_send(self) -> bool:
        return hasattr(self._socket, "sendall") and hasattr(self._socket, "settimeout")

    def send(self, data: bytes) -> None:
        """Write to the exec's stdin (it must have been created with stdin=True)."""
        self._socket.settimeout(max(self.deadline - time.monotonic(), 0.001))
        self._socket.sendall(data)

    def _read_exactly(self, count: int) -> bytes | None:
        data = b""
        while len(data) < count:
            chunk = self._read_some(count - len(data))
            if chunk is None:
                return None
            data += chunk
        return data

    def _read_some(self, limit: int) -> bytes | None:
        """Up to `limit` bytes; None at EOF or when the deadline has passed."""
        if self._buffer:
            chunk, self._buffer = self._buffer[:limit], self._buffer[limit:]
            return chunk
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            self.deadline_passed = True
            return None
        self._socket.settimeout(remaining)
        try:
            data = self._receive()
        except (socket.timeout, TimeoutError):
            self.deadline_passed = True
            return None
        if not data:
            return None
        self._buffer = data[limit:]
        return data[:limit]

    def _receive(self) -> bytes:
        """What has arrived, without waiting for more than one receive."""
        read1 = getattr(self._reader, "read1", None)
        if read1 is not None:
            return read1(_RECV_BYTES)
        # paramiko's file (ssh://) has no read1, and its read waits for all it
        # was asked for: take what it holds, else one receive from the channel.
        held, self._reader._rbuffer = self._reader._rbuffer, b""
        return held or self._socket.recv(_RECV_BYTES)


def _exit_code(api, exec_id: str) -> int | None:
    # The stream can end a moment before the engine records the exit code.
    give_up = time.monotonic() + EXIT_CODE_WAIT_S
    with translated("read a sandbox command's exit code"):
        while True:
            info = api.exec_inspect(exec_id)
            if not info.get("Running") and info.get("ExitCode") is not None:
                return int(info["ExitCode"])
            if time.monotonic() >= give_up:
                return None
            time.sleep(_EXIT_CODE_POLL_S)
