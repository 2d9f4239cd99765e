"""Long-lived command servers inside the sandbox container.

A `docker exec` costs 16-45 ms here before its command does anything (the
engine spawns every exec through runc), which was most of a tool call. So the
workspace keeps a few small servers running in the container, each attached
to one exec stream, and hands them argvs to run: a call then costs a round
trip over a stream that is already open and one fork.

The server is a page of perl (perl-base is Essential in Debian, so every
Debian image has it; the image has no Python). It runs exactly what one exec
would have run: the same argv (which carries its own `timeout`), with exactly
the environment given, as the same user, from `/`, and it reads stdout and
stderr apart, keeping the first bytes of each and dropping the rest while the
command runs to its end, as exec_argv does. What a command can do is therefore
unchanged. What is new is state that outlives a call (the server), so the
host treats every reply as untrusted, as it always treated exec output:

- a command runs in its own process group, killed when the command exits, so
  nothing it starts outlives the call (the plain-exec path does the same
  through a small shell wrapper, `killing_leftovers`);
- a command never holds the stream: its stdin is /dev/null, its stdout and
  stderr are pipes the server reads; every other descriptor is close-on-exec,
  and the server's own complaints go to /dev/null;
- the server makes itself non-dumpable, so a command of the same uid cannot
  open its stream through /proc/<pid>/fd to read requests or write replies;
- a reply is framed by a nonce the host picks per call and never hands to a
  command, its output comes in length-prefixed chunks that may not exceed the
  caps asked for, and it must end with the nonce again;
- a reply that breaks any of that, or a server that is gone, retires the
  channel and the call is run again by a plain exec in the time it has left,
  so a command that kills its server (or an OOM kill that picks it) costs
  time, not the run;
- a reply's bytes are only ever text for the model or paths inside the
  container, exactly as before: nothing on the host acts on them otherwise.

Protocol, all on the stream's stdout: the host writes NUL-terminated fields
(nonce, stdout cap, stderr cap, the number of environment entries, the
entries, the number of arguments, the arguments); the server answers
`R<nonce>\n`, then chunks `O<n>\n` or `E<n>\n` followed by n bytes of the
command's stdout or stderr, then `Z<nonce> <exit code>\n`. When it cannot
fork, it answers `F<nonce>\n` alone. Nothing is buffered in the container.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

from dispatcher.errors import SandboxError, ToolInputError
from sandbox.docker_engine import translated
from sandbox.docker_exec import ExecOutcome, FrameReader, exec_argv, start_exec
from sandbox.workspace import CappedBuffer

# How long a new server may take to say it is ready (it takes about 40 ms).
OPEN_TIMEOUT_S = 5.0
# Servers kept per container (one perl process of about 5 MB each): as many as
# the agent runs tool calls at once (dispatcher.agent.DEFAULT_MAX_PARALLEL_TOOLS);
# calls beyond this many at once use plain execs.
MAX_CHANNELS = 8
# Failed attempts to open a server after which a workspace stops trying.
MAX_OPEN_FAILURES = 3
# How long a server may take to acknowledge a call before it is given up.
ACK_TIMEOUT_S = 2.0
# How long a command's output may stay open after it exits and its group is
# killed (a child that left the group holding it): then the call ends.
DRAIN_S = 2.0
# Runs "$@" in the background, waits for it, kills what it left in its group
# and exits with its status. Every argv the workspace runs is, or execs,
# `timeout`, which makes itself the leader of a process group of its own.
_KILL_LEFTOVERS = '"$@" & pid=$!; wait "$pid"; status=$?; kill -KILL -"$pid" 2>/dev/null; exit "$status"'
_MAX_LINE_BYTES = 64  # every line of the protocol is shorter
_STDOUT = 1

SERVER = r"""
use strict;
use POSIX ();
use Time::HiRes ();
open(STDERR, '>', '/dev/null');
binmode(STDIN);
binmode(STDOUT);

# Not dumpable: /proc/<this server>/fd, mem and environ become root's, so a
# command of the same uid cannot read requests (nonces) off our stdin or write
# replies into our stdout. A command gets its own dumpable state back at exec.
# prctl(PR_SET_DUMPABLE=4, 0); its syscall number depends on the architecture.
my %prctl = (x86_64 => 157, aarch64 => 167, riscv64 => 167, armv7l => 172, i686 => 172,
             ppc64le => 171, s390x => 172);
my $prctl = $prctl{(POSIX::uname())[4]};
defined($prctl) && syscall($prctl, 4, 0, 0, 0, 0) == 0 or exit 4;

sub put {  # write all of it, or stop: the host has hung up
    my ($data) = @_;
    for (my $done = 0; $done < length $data;) {
        my $wrote = syswrite(STDOUT, $data, length($data) - $done, $done);
        exit 0 unless defined $wrote;
        $done += $wrote;
    }
}
sub field {
    local $/ = "\0";
    my $value = <STDIN>;
    exit 0 unless defined $value;
    chomp($value) or exit 3;
    return $value;
}
sub number {
    my $value = field();
    $value =~ /\A[0-9]{1,12}\z/ or exit 3;
    return $value;
}

put("READY\n");
while (1) {
    my $nonce = field();
    my ($out_cap, $err_cap) = (number(), number());
    my @env = map { field() } 1 .. number();
    my @argv = map { field() } 1 .. number();
    @argv or exit 3;
    pipe(my $out_read, my $out_write) and pipe(my $err_read, my $err_write) or exit 3;
    my $pid = fork();
    if (!defined $pid) {  # no process to spare: the host runs it by a plain exec
        put("F$nonce\n");
        next;
    }
    if ($pid == 0) {
        # Its own process group, so what it leaves running dies with it.
        POSIX::setpgid(0, 0);
        # Only the fds given here survive the exec: perl opens every other
        # one (the pipes' other ends too) close-on-exec.
        open(STDIN, '<', '/dev/null');
        open(STDOUT, '>&', $out_write);
        open(STDERR, '>&', $err_write);
        %ENV = map { split(/=/, $_, 2) } @env;
        { exec { $argv[0] } @argv; }
        print STDERR "$argv[0]: $!\n";
        POSIX::_exit(127);
    }
    close($out_write);
    close($err_write);
    put("R$nonce\n");
    my %open = (fileno($out_read) => [$out_read, 'O', $out_cap], fileno($err_read) => [$err_read, 'E', $err_cap]);
    my ($status, $exited);
    while (%open) {
        # Once the command has exited, whatever it left running in its group
        # is killed (a fork bomb would otherwise keep pids_limit full). Its
        # streams then get DRAIN_S, in case a process left the group, and are
        # closed.
        if (!defined $exited && waitpid($pid, POSIX::WNOHANG()) == $pid) {
            ($status, $exited) = ($?, Time::HiRes::time());
            kill('KILL', -$pid);
        }
        my $wait = defined $exited ? $exited + @DRAIN_S@ - Time::HiRes::time() : 0.1;
        last if $wait <= 0;
        my $wanted = '';
        vec($wanted, $_, 1) = 1 for keys %open;
        next if select(my $ready = $wanted, undef, undef, $wait) <= 0;
        for my $fd (keys %open) {
            next unless vec($ready, $fd, 1);
            my $stream = $open{$fd};
            my $got = sysread($stream->[0], my $data, 65536);
            if (!$got) {
                delete $open{$fd};
                next;
            }
            # Past its cap a stream is read and dropped, so the command runs
            # to its own end (and exit code) however much it prints.
            my $keep = $got < $stream->[2] ? $got : $stream->[2];
            next unless $keep > 0;
            $stream->[2] -= $keep;
            put($stream->[1] . $keep . "\n" . substr($data, 0, $keep));
        }
    }
    close($out_read);
    close($err_read);
    if (!defined $exited) {
        waitpid($pid, 0);
        $status = $?;
        kill('KILL', -$pid);
    }
    my $code = POSIX::WIFSIGNALED($status) ? 128 + POSIX::WTERMSIG($status) : POSIX::WEXITSTATUS($status);
    put("Z$nonce $code\n");
}
""".replace("@DRAIN_S@", str(DRAIN_S))


def killing_leftovers(argv: Sequence[str]) -> list[str]:
    """`argv` wrapped so that, run by a plain exec, what it leaves running is killed when it exits."""
    return ["sh", "-c", _KILL_LEFTOVERS, "sh", *argv]


class ChannelBroken(Exception):
    """The server is gone or its reply broke the protocol: retire it."""


class Channel:
    """One command server and the exec stream attached to it; one call at a time."""

    def __init__(self, response, frames: FrameReader) -> None:
        self._response = response
        self._frames = frames
        self._received = bytearray()  # stdout bytes received and not yet parsed

    @classmethod
    def open(cls, api, container_id: str, *, user: str, environment: Mapping[str, str],
             timeout_s: float = OPEN_TIMEOUT_S, program: Sequence[str] = ("perl", "-e", SERVER)) -> "Channel":
        """Start a server (`program` is for tests that play a lying one);
        raises ChannelBroken if it does not come up."""
        with translated("start a command server in the sandbox container"):
            exec_id = api.exec_create(container_id, list(program), stdin=True, stdout=True,
                                      stderr=True, tty=False, user=user, workdir="/",
                                      environment=dict(environment))["Id"]
            response = start_exec(api, exec_id)
        channel = cls(response, FrameReader(response, deadline=time.monotonic() + timeout_s))
        try:
            if not channel._frames.can_send:
                raise ChannelBroken("this engine connection cannot write to an exec")
            if channel._read_line() != b"READY":
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
        """Run `argv` as exec_argv would. A reply that does not end within
        `deadline_s` gives an outcome with `deadline_passed` and what arrived
        by then, and the channel must then be closed. Raises
        NotStarted when the server could not start the command (no process
        to spare): the channel is fine, the call needs a plain exec."""
        if not argv:
            raise ValueError("cannot run an empty argv")
        nonce = secrets.token_hex(8).encode()
        out_cap = max_stdout_bytes + 1  # one byte more tells a cut from an exact fit
        fields = [nonce, str(out_cap).encode(), str(max_stderr_bytes).encode(),
                  str(len(environment)).encode(),
                  *(f"{name}={value}".encode() for name, value in environment.items()),
                  str(len(argv)).encode(), *(arg.encode("utf-8", "surrogateescape") for arg in argv)]
        if any(b"\x00" in field for field in fields):
            raise ValueError("a command server cannot pass a NUL byte")
        started = time.monotonic()
        # A live server acknowledges at once; one that does not (stopped,
        # wedged) is given up early, so the call keeps time for a plain exec.
        self._frames.deadline = started + min(deadline_s, ACK_TIMEOUT_S)
        try:
            self._frames.send(b"".join(field + b"\x00" for field in fields))
        except OSError as exc:
            raise ChannelBroken(f"cannot write to the command server: {exc}") from exc
        # What the caller gets (the exec path's own capping), and what the
        # server may still send of each stream: it was told the caps.
        kept = {b"O": CappedBuffer(max_stdout_bytes), b"E": CappedBuffer(max_stderr_bytes)}
        allowed = {b"O": out_cap, b"E": max_stderr_bytes}
        try:
            first = self._read_line()
        except _DeadlinePassed:
            raise ChannelBroken("the command server did not acknowledge the call") from None
        if first == b"F" + nonce:
            raise NotStarted
        if first != b"R" + nonce:
            raise ChannelBroken("the command server's reply is garbled")
        self._frames.deadline = started + deadline_s
        exit_code = None
        try:
            while True:
                line = self._read_line()
                tag, size = line[:1], line[1:]
                if tag in kept and size.isdigit() and 0 < int(size) <= allowed[tag]:
                    allowed[tag] -= int(size)
                    kept[tag].add(self._read_exactly(int(size)))
                    continue
                exit_code = _exit_code(line, nonce)
                break
        except _DeadlinePassed:
            pass
        return ExecOutcome(exit_code=exit_code, stdout=kept[b"O"].data(), stderr=kept[b"E"].data(),
                           stdout_overflowed=kept[b"O"].overflowed, deadline_passed=self._frames.deadline_passed,
                           elapsed_s=time.monotonic() - started)

    def close(self) -> None:
        """Hang up: the server reads the end of its input and exits (after the
        command in hand, if any, which its timeout bounds)."""
        try:
            self._response.close()
        except (OSError, ValueError):
            pass

    # -- reading the reply ---------------------------------------------------------
    def _read_line(self) -> bytes:
        """The next line, without its newline; every line of the protocol is short."""
        while (newline := self._received.find(b"\n")) < 0:
            if len(self._received) > _MAX_LINE_BYTES:
                raise ChannelBroken("the command server's reply is garbled")
            self._receive()
        line, self._received = self._received[:newline], self._received[newline + 1:]
        if len(line) > _MAX_LINE_BYTES:
            raise ChannelBroken("the command server's reply is garbled")
        return bytes(line)

    def _read_exactly(self, count: int) -> bytes:
        while len(self._received) < count:
            self._receive()
        data, self._received = self._received[:count], self._received[count:]
        return bytes(data)

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
        if kind == _STDOUT:  # the server's stderr is /dev/null: anything there is noise
            self._received += data


def _exit_code(line: bytes, nonce: bytes) -> int:
    tag, _, code = line.partition(b" ")
    if tag != b"Z" + nonce or not code.isdigit():
        raise ChannelBroken("the command server's reply is garbled")
    return int(code)


class NotStarted(Exception):
    """The server could not fork the command; the call needs a plain exec."""


class _DeadlinePassed(Exception):
    pass


class ChannelPool:
    """Command servers for one container, lent one call at a time.

    A call takes an idle server, or opens one while fewer than `max_channels`
    (MAX_CHANNELS unless the engine is reached over SSH) exist, or else runs as
    a plain exec; so parallel tool calls never queue behind each other, and a
    workspace whose servers cannot start still works.
    """

    def __init__(self, api, container_id: Callable[[], str], *, user: str,
                 environment: Mapping[str, str], max_channels: int | None = None,
                 max_parallel_execs: int | None = None) -> None:
        self._api = api
        self._max_channels = MAX_CHANNELS if max_channels is None else max_channels
        # Execs being started at once, plain ones and servers' (None: any number).
        self._exec_slots = threading.BoundedSemaphore(max_parallel_execs) if max_parallel_execs else None
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
        """Run `argv` in the container, through a server when one is free,
        all within `deadline_s` (opening a server and any retry included)."""
        give_up = time.monotonic() + deadline_s
        channel = self._take(open_timeout_s=min(OPEN_TIMEOUT_S, deadline_s))
        if channel is not None:
            try:
                outcome = channel.call(argv, environment=environment, deadline_s=give_up - time.monotonic(),
                                       max_stdout_bytes=max_stdout_bytes, max_stderr_bytes=max_stderr_bytes)
            except ChannelBroken:
                # Run again by a plain exec, in the time left: every command the
                # workspace runs only reads (or is mkdir -p), so a second run is
                # safe, and a killed server costs the call time, not the run.
                self._retire(channel)
            except (NotStarted, ValueError):  # an exec starts it, or reports why not
                self._give_back(channel)
            except BaseException:  # an interrupt mid-reply: the stream is in an unknown state
                self._retire(channel)
                raise
            else:
                if outcome.deadline_passed:
                    self._retire(channel)
                else:
                    self._give_back(channel)
                return outcome
        left = give_up - time.monotonic()
        if left <= 0:
            return ExecOutcome(exit_code=None, stdout=b"", stderr=b"", stdout_overflowed=False,
                               deadline_passed=True, elapsed_s=deadline_s)
        # Waiting for a slot does not eat into the command's time: its own
        # `timeout` only starts with it.
        with self.exec_slot(time.monotonic() + deadline_s) as has_slot:
            if not has_slot:
                raise ToolInputError("the sandbox is busy with other calls; call again")
            return exec_argv(self._api, self._container_id(), killing_leftovers(argv), user=self._user,
                             workdir="/", environment=environment, deadline_s=left,
                             max_stdout_bytes=max_stdout_bytes, max_stderr_bytes=max_stderr_bytes,
                             want_exit_code=want_exit_code)

    @contextlib.contextmanager
    def exec_slot(self, give_up: float) -> Iterator[bool]:
        """Whether an exec (or another streaming API call, such as an archive
        upload) may start now, waiting until `give_up` (a time.monotonic()
        value) for one of the limited slots when there is a limit."""
        if self._exec_slots is None:
            yield True
            return
        if not self._exec_slots.acquire(timeout=max(give_up - time.monotonic(), 0)):
            yield False
            return
        try:
            yield True
        finally:
            self._exec_slots.release()

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

    def _take(self, open_timeout_s: float = OPEN_TIMEOUT_S) -> Channel | None:
        with self._lock:
            if self._closed:
                return None
            if self._idle:
                return self._idle.pop()
            if self._count >= self._max_channels or self._open_failures >= MAX_OPEN_FAILURES:
                return None
            self._count += 1
        try:
            # Opening a server starts an exec too, so it counts against the limit.
            with self.exec_slot(time.monotonic() + open_timeout_s) as has_slot:
                if has_slot:
                    return Channel.open(self._api, self._container_id(), user=self._user,
                                        environment=self._environment, timeout_s=open_timeout_s)
        except (ChannelBroken, SandboxError, OSError):
            # The plain exec that follows reports a real problem (the container
            # gone) in its own words; a server that cannot start only costs speed.
            with self._lock:
                self._open_failures += 1
        with self._lock:
            self._count -= 1
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
