"""Long-lived command servers inside the sandbox container.

A `docker exec` costs about 44 ms here before its command does anything (the
engine spawns every exec through runc), which was most of a tool call. So the
workspace keeps a few bash processes running in the container, each attached
to one exec stream, and hands them argvs to run: a call then costs a round
trip over a stream that is already open and a few forks.

A server runs exactly what one exec would have run: the same argv, under
`timeout -s KILL`, with exactly the environment given (`env -i`), as the same
user, from `/`. What a command can do is therefore unchanged. What is new is
state that outlives a call (the server), so the host
treats every reply as untrusted, as it always treated exec output:

- a command never holds the stream: its stdin is /dev/null, its stdout and
  stderr pipes into `head`; the server's own complaints go to /dev/null;
- a reply is framed by a nonce the host picks per call and never hands to a
  command, its output is base64 (so it cannot end a reply early), and no line
  may be longer than the caps the host asked for allow;
- a reply that breaks any of that, or a server that is gone, retires the
  channel and the call is run again by a plain exec, so a command that kills
  its server (or an OOM kill that picks it) costs time, not the run;
- a reply's bytes are only ever text for the model or paths inside the
  container, exactly as before: nothing on the host acts on them.

Protocol: the host writes NUL-terminated fields: nonce, stdout cap, stderr
cap, seconds, the number of environment entries, the entries, the number of
arguments, the arguments. On the stream's stdout the server answers
`R<nonce>`, the command's stdout in base64, `Z<nonce> <exit code>`, a line
each; on the stream's stderr, `E<nonce> ` and the command's stderr in base64,
one line. Nothing is buffered in the container: output streams through
`head` and `base64` as the command writes it.
"""

from __future__ import annotations

import base64
import binascii
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from dispatcher.errors import SandboxError
from sandbox.docker_engine import translated
from sandbox.docker_exec import ExecOutcome, FrameReader, exec_argv, start_exec

# What the host waits for a reply beyond the server's own timeout on the call.
REPLY_GRACE_S = 2.0
# How long a new server may take to say it is ready.
OPEN_TIMEOUT_S = 10.0
# Servers kept per container: calls beyond this many at once use plain execs.
MAX_CHANNELS = 4
# Failed attempts to open a server after which a workspace stops trying.
MAX_OPEN_FAILURES = 3
_MAX_LINE_BYTES = 128  # READY, and the line that ends a reply
_STDOUT, _STDERR = 1, 2

SERVER = r"""
# fd 4 is the stream's stderr, for replies; bash's own complaints go nowhere.
exec 4>&2 2>/dev/null
field() { IFS= read -r -d '' "$1"; }
number() { case $1 in ''|*[!0-9]*) exit 3 ;; esac; }
printf 'READY\n'
while field nonce; do
  field out_cap && field err_cap && field seconds && field count || exit 3
  number "$out_cap"; number "$err_cap"; number "$count"
  env=()
  while (( ${#env[@]} < count )); do field item || exit 3; env+=("$item"); done
  field count || exit 3; number "$count"
  argv=()
  while (( ${#argv[@]} < count )); do field item || exit 3; argv+=("$item"); done
  (( ${#argv[@]} > 0 )) || exit 3
  printf 'R%s\n' "$nonce"
  # Each stream: head keeps the first bytes, base64 makes them one line that
  # cannot look like the end of the reply, and cat drains the rest so the
  # command runs to its own end (and exit code) however much it prints.
  # (Redirections apply in order: the process substitution must be made
  # before fd 4 is closed for the command.)
  timeout -s KILL "$seconds" env -i "${env[@]}" "${argv[@]}" \
    2> >(printf 'E%s ' "$nonce" >&4; { head -c "$err_cap" | base64 -w 0; cat >/dev/null; } >&4; printf '\n' >&4) \
    </dev/null 4>&- | { head -c "$out_cap" | base64 -w 0; cat >/dev/null; } 4>&-
  status=${PIPESTATUS[0]}
  wait $!
  printf '\nZ%s %s\n' "$nonce" "$status"
done
"""


class ChannelBroken(Exception):
    """The server is gone or its reply broke the protocol: retire it."""


class Channel:
    """One command server and the exec stream attached to it; one call at a time."""

    def __init__(self, response, frames: FrameReader) -> None:
        self._response = response
        self._frames = frames
        # Bytes received per stream and not yet parsed.
        self._received = {_STDOUT: b"", _STDERR: b""}

    @classmethod
    def open(cls, api, container_id: str, *, user: str, environment: Mapping[str, str]) -> "Channel":
        """Start a server; raises ChannelBroken if it does not come up."""
        with translated("start a command server in the sandbox container"):
            exec_id = api.exec_create(container_id, ["bash", "-c", SERVER], stdin=True, stdout=True,
                                      stderr=True, tty=False, user=user, workdir="/",
                                      environment=dict(environment))["Id"]
            response = start_exec(api, exec_id)
        channel = cls(response, FrameReader(response, deadline=time.monotonic() + OPEN_TIMEOUT_S))
        try:
            if not channel._frames.can_send:
                raise ChannelBroken("this engine connection cannot write to an exec")
            if channel._read_line(_STDOUT, _MAX_LINE_BYTES) != b"READY":
                raise ChannelBroken("the command server did not start")
        except _DeadlinePassed:
            channel.close()
            raise ChannelBroken("the command server did not start in time") from None
        except BaseException:
            channel.close()
            raise
        return channel

    def call(self, argv: Sequence[str], *, environment: Mapping[str, str], deadline_s: float,
             max_stdout_bytes: int, max_stderr_bytes: int) -> ExecOutcome:
        """Run `argv` as exec_argv would. A reply that does not come within
        `deadline_s` (plus a grace for the reply itself) gives an outcome with
        `deadline_passed`, and the channel must then be closed."""
        if not argv or "=" in argv[0]:  # env(1) would take it for an assignment
            raise ValueError(f"cannot run {argv[:1]!r} through a command server")
        nonce = secrets.token_hex(8).encode()
        fields = [nonce, str(max_stdout_bytes + 1).encode(), str(max_stderr_bytes).encode(),
                  f"{deadline_s:.3f}".encode(), str(len(environment)).encode(),
                  *(f"{name}={value}".encode() for name, value in environment.items()),
                  str(len(argv)).encode(), *(arg.encode("utf-8", "surrogateescape") for arg in argv)]
        if any(b"\x00" in field for field in fields):
            raise ValueError("a command server cannot pass a NUL byte")
        started = time.monotonic()
        self._frames.deadline = started + deadline_s + REPLY_GRACE_S
        try:
            self._frames.send(b"".join(field + b"\x00" for field in fields))
        except OSError as exc:
            raise ChannelBroken(f"cannot write to the command server: {exc}") from exc
        try:
            self._expect(_STDOUT, b"R" + nonce)
            stdout = self._decoded(self._read_line(_STDOUT, _encoded_size(max_stdout_bytes + 1)))
            exit_code = self._exit_code(self._read_line(_STDOUT, _MAX_LINE_BYTES), nonce)
            prefix = b"E" + nonce + b" "
            line = self._read_line(_STDERR, len(prefix) + _encoded_size(max_stderr_bytes))
            if not line.startswith(prefix):
                raise ChannelBroken("the command server's reply is garbled")
            stderr = self._decoded(line[len(prefix):])
        except _DeadlinePassed:
            return ExecOutcome(exit_code=None, stdout=b"", stderr=b"", stdout_overflowed=False,
                               deadline_passed=True, elapsed_s=time.monotonic() - started)
        if len(stdout) > max_stdout_bytes + 1 or len(stderr) > max_stderr_bytes:
            raise ChannelBroken("the command server sent more than was asked for")
        return ExecOutcome(exit_code=exit_code, stdout=stdout[:max_stdout_bytes], stderr=stderr,
                           stdout_overflowed=len(stdout) > max_stdout_bytes, deadline_passed=False,
                           elapsed_s=time.monotonic() - started)

    def close(self) -> None:
        """Hang up: the server reads the end of its input and exits (after the
        command in hand, if any, which its timeout bounds)."""
        try:
            self._response.close()
        except (OSError, ValueError):
            pass

    # -- reading the reply ---------------------------------------------------------
    def _expect(self, stream: int, wanted: bytes) -> None:
        if self._read_line(stream, len(wanted)) != wanted:
            raise ChannelBroken("the command server's reply is garbled")

    @staticmethod
    def _exit_code(line: bytes, nonce: bytes) -> int:
        tag, _, code = line.partition(b" ")
        if tag != b"Z" + nonce or not code.isdigit():
            raise ChannelBroken("the command server's reply did not end as it began")
        return int(code)

    @staticmethod
    def _decoded(line: bytes) -> bytes:
        try:
            return base64.b64decode(line, validate=True)
        except binascii.Error:
            raise ChannelBroken("the command server's reply is garbled") from None

    def _read_line(self, stream: int, max_bytes: int) -> bytes:
        """The next line on `stream`, without its newline, if it is no longer than `max_bytes`."""
        searched = 0
        while (newline := self._received[stream].find(b"\n", searched)) < 0:
            searched = len(self._received[stream])
            if searched > max_bytes:
                raise ChannelBroken("the command server sent more than was asked for")
            self._receive()
        line, self._received[stream] = self._received[stream][:newline], self._received[stream][newline + 1:]
        if len(line) > max_bytes:
            raise ChannelBroken("the command server sent more than was asked for")
        return line

    def _receive(self) -> None:
        try:
            frame = self._frames.next_frame()
        except OSError as exc:
            raise ChannelBroken(f"lost the command server: {exc}") from exc
        if frame is None:
            if self._frames.deadline_passed:
                raise _DeadlinePassed
            raise ChannelBroken("the command server exited")
        kind, data = frame
        if kind in self._received:
            self._received[kind] += data


def _encoded_size(count: int) -> int:
    """Length of `count` bytes in base64."""
    return 4 * ((count + 2) // 3)


class _DeadlinePassed(Exception):
    pass


class ChannelPool:
    """Command servers for one container, lent one call at a time.

    A call takes an idle server, or opens one while fewer than MAX_CHANNELS
    exist, or else runs as a plain exec; so parallel tool calls never queue
    behind each other, and a workspace whose servers cannot start still works.
    """

    def __init__(self, api, container_id: Callable[[], str], *, user: str,
                 environment: Mapping[str, str]) -> None:
        self._api = api
        self._container_id = container_id
        self._user = user
        self._environment = dict(environment)
        self._lock = threading.Lock()
        self._idle: list[Channel] = []
        self._count = 0
        self._open_failures = 0
        self._closed = False

    def warm(self) -> None:
        """Open one server ahead of the first call (run while the clone runs)."""
        channel = self._take()
        if channel is not None:
            self._give_back(channel)

    def run(self, argv: Sequence[str], *, environment: Mapping[str, str], deadline_s: float,
            max_stdout_bytes: int, max_stderr_bytes: int, want_exit_code: bool = True) -> ExecOutcome:
        """Run `argv` in the container, through a server when one is free."""
        channel = self._take()
        if channel is not None:
            try:
                outcome = channel.call(argv, environment=environment, deadline_s=deadline_s,
                                       max_stdout_bytes=max_stdout_bytes, max_stderr_bytes=max_stderr_bytes)
            except ChannelBroken:
                self._retire(channel)
            except ValueError:  # not something a server can pass: an exec reports it
                self._give_back(channel)
            else:
                if outcome.deadline_passed:
                    self._retire(channel)
                else:
                    self._give_back(channel)
                return outcome
        return exec_argv(self._api, self._container_id(), argv, user=self._user, workdir="/",
                         environment=environment, deadline_s=deadline_s, max_stdout_bytes=max_stdout_bytes,
                         max_stderr_bytes=max_stderr_bytes, want_exit_code=want_exit_code)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for channel in idle:
            channel.close()

    @property
    def open_channels(self) -> int:
        """Servers open now (for tests and benchmarks)."""
        with self._lock:
            return self._count

    def _take(self) -> Channel | None:
        with self._lock:
            if self._closed:
                return None
            if self._idle:
                return self._idle.pop()
            if self._count >= MAX_CHANNELS or self._open_failures >= MAX_OPEN_FAILURES:
                return None
            self._count += 1
        try:
            return Channel.open(self._api, self._container_id(), user=self._user, environment=self._environment)
        except (ChannelBroken, SandboxError, OSError):
            # The plain exec that follows reports a real problem (the container
            # gone) in its own words; a server that cannot start only costs speed.
            with self._lock:
                self._count -= 1
                self._open_failures += 1
            return None

    def _give_back(self, channel: Channel) -> None:
        with self._lock:
            if not self._closed:
                self._idle.append(channel)
                return
            self._count -= 1
        channel.close()

    def _retire(self, channel: Channel) -> None:
        channel.close()
        with self._lock:
            self._count -= 1
