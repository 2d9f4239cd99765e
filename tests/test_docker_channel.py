"""Tool calls in the Docker workspace go through long-lived command servers in
the container (sandbox.docker_channel): fewer execs, the same results, and no
way for a hostile command to make a call answer with anything but its own
output. Real engine, real image, counted through the engine's own events."""

from __future__ import annotations

import threading
import time

import pytest

from sandbox.docker_channel import MAX_CHANNELS
from sandbox.docker_container import CONTAINER_HOME
from sandbox.environment import scrubbed_environment
from sandbox.workspace import Command
from tests.support.docker_engine import docker_engine, docker_settings, docker_workspace, tcp_engine  # noqa: F401

pytestmark = pytest.mark.docker

# Three calls this long at once leave three servers open (they overlap even on a loaded machine).
OVERLAP_S = "1"


def exec_creations(client, container_id: str) -> int:
    """How many execs the engine has created in the container so far."""
    events = client.api.events(since=0, until=int(time.time()) + 1, decode=True,
                               filters={"container": container_id, "event": "exec_create"})
    return sum(1 for _ in events)


def ready(workspace):
    """The workspace with its container running and the server it opens ahead of time in place."""
    workspace.after_prepare()
    workspace.resolve(".")  # waits for the container
    deadline = time.monotonic() + 30
    while workspace._channels.open_channels < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    return workspace


def test_many_calls_cost_a_few_execs(docker_engine, docker_workspace):
    """Forty workspace calls of every kind create at most MAX_CHANNELS execs, not forty."""
    workspace = ready(docker_workspace)
    workspace.write_bytes("a.txt", b"alpha\n")
    for _ in range(10):
        assert workspace.read_bytes("a.txt", 100).data == b"alpha\n"
        assert [entry.path for entry in workspace.list_dir(".")] == ["a.txt"]
        assert workspace.resolve("./a.txt") == "a.txt"
        assert workspace.run(Command(["cat", "a.txt"])).stdout == b"alpha\n"
    assert exec_creations(docker_engine, workspace.container_id) <= MAX_CHANNELS


def test_servers_work_over_a_tcp_engine(docker_engine, docker_settings, tcp_engine):
    """Over DOCKER_HOST=tcp:// (a remote engine) calls also go through servers, not an exec each."""
    from sandbox.docker import DockerWorkspace

    workspace = DockerWorkspace.open("repo", docker_settings, environ=tcp_engine)
    try:
        workspace.write_bytes("remote.txt", b"over tcp\n")
        ready(workspace)
        for _ in range(10):
            assert workspace.run(Command(["cat", "remote.txt"])).stdout == b"over tcp\n"
            assert workspace.read_bytes("remote.txt", 100).data == b"over tcp\n"
        assert exec_creations(docker_engine, workspace.container_id) <= MAX_CHANNELS
    finally:
        workspace.close()


def test_arguments_and_output_pass_byte_for_byte(docker_workspace):
    """Arguments with newlines, spaces, quotes, dashes, non-ASCII and empty strings reach
    the command unchanged, and binary output (NULs, high bytes, no final newline) comes back whole."""
    workspace = ready(docker_workspace)
    arguments = ["two\nlines", " spaced ", "'\"$(x)`y`", "--pre=sh", "", "naïve ☃", "\\n", "*"]
    result = workspace.run(Command(["printf", "%s\\0", *arguments]))
    assert result.stdout.split(b"\x00")[:-1] == [a.encode() for a in arguments]
    binary = bytes(range(256)) * 3
    workspace.write_bytes("blob.bin", binary)
    assert workspace.run(Command(["cat", "blob.bin"])).stdout == binary
    assert workspace.read_bytes("blob.bin", 10_000).data == binary


def test_exit_code_stderr_and_caps_are_the_commands_own(docker_workspace):
    """A command's exit code and stderr come back; output past the cap is cut and
    flagged while the command still runs to its own end."""
    workspace = ready(docker_workspace)
    result = workspace.run(Command(["sh", "-c", "echo out; echo err >&2; exit 7"]))
    assert (result.exit_code, result.stdout, result.stderr, result.truncated) == (7, b"out\n", b"err\n", False)
    big = workspace.run(Command(["sh", "-c", "head -c 5000000 /dev/zero; echo done >&2; exit 3"],
                                max_output_bytes=1000))
    assert big.stdout == b"\x00" * 1000 and big.truncated
    assert (big.exit_code, big.stderr) == (3, b"done\n")
    exact = workspace.run(Command(["head", "-c", "1000", "/dev/zero"], max_output_bytes=1000))
    assert len(exact.stdout) == 1000 and not exact.truncated


def test_each_call_gets_exactly_its_environment(docker_workspace):
    """A call sees the scrubbed environment plus its own variables, and nothing a
    previous call was given lingers for the next one."""
    workspace = ready(docker_workspace)
    first = workspace.run(Command(["env"], env={"RESEARCH_PROBE": "1"}))
    names = {line.split("=", 1)[0] for line in first.stdout.decode().splitlines()}
    assert "RESEARCH_PROBE" in names and "PATH" in names
    # Exactly the scrubbed environment, the call's own variable, and what sh sets on cd.
    expected = set(scrubbed_environment(home=CONTAINER_HOME, source={})) | {"PATH", "RESEARCH_PROBE", "PWD", "OLDPWD"}
    assert names == expected
    second = workspace.run(Command(["env"]))
    assert b"RESEARCH_PROBE" not in second.stdout


def test_a_timed_out_call_leaves_the_server_serving(docker_engine, docker_workspace):
    """A call killed at its timeout reports timed_out, and the calls after it
    still go through the existing servers."""
    workspace = ready(docker_workspace)
    workspace.run(Command(["true"]))
    before = exec_creations(docker_engine, workspace.container_id)
    result = workspace.run(Command(["sh", "-c", "echo partial; sleep 30"], timeout_s=1))
    assert result.timed_out and result.exit_code == 137 and result.stdout == b"partial\n"
    assert workspace.run(Command(["echo", "next"])).stdout == b"next\n"
    assert exec_creations(docker_engine, workspace.container_id) == before


def test_a_background_child_holding_the_output_ends_the_call_soon_after_the_command(docker_workspace):
    """A command that exits leaving a child with its stdout open answers with its own
    exit code a moment later, as a plain exec does, instead of running into its timeout."""
    workspace = ready(docker_workspace)
    result = workspace.run(Command(["sh", "-c", "echo started; sleep 60 &"], timeout_s=20))
    assert (result.exit_code, result.stdout, result.timed_out) == (0, b"started\n", False)
    assert workspace.run(Command(["echo", "next"])).stdout == b"next\n"


def test_parallel_calls_each_get_their_own_answer(docker_workspace):
    """Twelve overlapping calls from threads each get their own output, with no
    more than MAX_CHANNELS servers open."""
    workspace = ready(docker_workspace)
    results: dict[int, bytes] = {}

    def call(number: int) -> None:
        results[number] = workspace.run(Command(["sh", "-c", f"sleep 0.3; echo {number}"])).stdout

    threads = [threading.Thread(target=call, args=(n,)) for n in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {n: f"{n}\n".encode() for n in range(12)}
    assert workspace._channels.open_channels <= MAX_CHANNELS


# -- hostile commands ---------------------------------------------------------------------------
# Commands run as the same user as the servers, so a hostile one can reach
# them through /proc. It must not be able to change what any call answers.
# Kills every command server (perl) it can see, tallying the kills in /tmp,
# since the call that reports back may be the retry that found none left.
KILL_EVERY_SERVER = """
for status in /proc/[0-9]*/status; do
  case $(head -n 1 "$status") in *perl)
    pid=${status#/proc/}; kill -9 "${pid%/status}" && echo killed >> /tmp/tally ;;
  esac
done
echo survived
"""

# A server that lies: it reads each request and answers in the way its
# argument names, where only "honest" keeps the protocol.
LYING_SERVER = r"""
binmode(STDIN); binmode(STDOUT); $| = 1;
my $how = shift;
print "READY\n";
local $/ = "\0";
sub field { my $v = <STDIN>; exit 0 unless defined $v; chomp $v; $v }
while (1) {
    my ($nonce, $out_cap) = (field(), field());
    field();
    field() for 1 .. field();
    field() for 1 .. field();
    my $too_much = $out_cap + 1;
    print $how eq "honest"      ? "R$nonce\nO6\nHONESTZ$nonce 0\n"
        : $how eq "other-nonce" ? "R0000\nO6\nFORGEDZ0000 0\n"
        : $how eq "wrong-end"   ? "R$nonce\nO6\nFORGEDZ0000 0\n"
        : $how eq "over-cap"    ? "R$nonce\nO$too_much\n" . ("x" x $too_much) . "Z$nonce 0\n"
        : $how eq "long-line"   ? "R$nonce\n" . ("O" x 100_000) . "\n"
        :                         "R$nonce\nQ6\nFORGEDZ$nonce 0\n";
}
"""


# Tries to open every server's stdin and stdout through /proc, printing one
# line per attempt: "opened" or "denied".
PEEK_AT_SERVERS = """
for status in /proc/[0-9]*/status; do
  case $(head -n 1 "$status") in *perl)
    fd=${status%/status}/fd
    for n in 0 1; do
      # (true, not ':': a failed redirection on a special builtin ends sh)
      if true < "$fd/$n" 2>/dev/null || true > "$fd/$n" 2>/dev/null; then echo opened; else echo denied; fi
    done ;;
  esac
done
"""

# Stops every command server except its own (the parent of its timeout).
STOP_OTHER_SERVERS = """
own=$(awk '/^PPid/ {print $2}' /proc/$PPID/status)
stopped=0
for status in /proc/[0-9]*/status; do
  pid=${status#/proc/}; pid=${pid%/status}
  case $(head -n 1 "$status") in *perl)
    [ "$pid" = "$own" ] || { kill -STOP "$pid" && stopped=$((stopped + 1)); } ;;
  esac
done
echo "stopped $stopped"
"""


def tally(workspace) -> bytes:
    return workspace.run(Command(["sh", "-c", "cat /tmp/tally 2>/dev/null | wc -l"])).stdout.strip()


def test_a_command_that_kills_the_servers_still_gets_its_answer(docker_workspace):
    """Killing every server mid-call costs a retry by plain exec: the call answers
    with its own output, and later calls work (through new servers)."""
    workspace = ready(docker_workspace)
    workspace.write_bytes("kept.txt", b"kept")
    result = workspace.run(Command(["sh", "-c", KILL_EVERY_SERVER]))
    assert result.stdout == b"survived\n" and result.exit_code == 0
    assert int(tally(workspace)) >= 1  # the attack did kill servers
    for _ in range(3):
        assert workspace.read_bytes("kept.txt", 10).data == b"kept"
        assert workspace.run(Command(["echo", "again"])).stdout == b"again\n"
    assert workspace._channels.open_channels >= 1


def test_a_command_cannot_open_a_servers_stream(docker_workspace):
    """The servers are not dumpable: a command of the same uid can neither read their
    requests (and nonces) from /proc/<pid>/fd/0 nor write replies into fd/1."""
    workspace = ready(docker_workspace)
    threads = [threading.Thread(target=workspace.run, args=(Command(["sleep", OVERLAP_S]),)) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    attempts = workspace.run(Command(["sh", "-c", PEEK_AT_SERVERS])).stdout.split()
    assert len(attempts) >= 6 and set(attempts) == {b"denied"}


def test_stopped_servers_are_given_up_and_calls_still_answer(docker_workspace):
    """A command that SIGSTOPs every other server does not stall the calls after it:
    a server that does not acknowledge a call is retired and the call runs by exec."""
    workspace = ready(docker_workspace)
    workspace.write_bytes("kept.txt", b"kept")
    threads = [threading.Thread(target=workspace.run, args=(Command(["sleep", OVERLAP_S]),)) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stopped = workspace.run(Command(["sh", "-c", STOP_OTHER_SERVERS])).stdout
    assert stopped.startswith(b"stopped ") and int(stopped.split()[1]) >= 1
    for _ in range(MAX_CHANNELS + 1):
        assert workspace.read_bytes("kept.txt", 10).data == b"kept"
        assert workspace.run(Command(["cat", "kept.txt"])).stdout == b"kept"


@pytest.mark.parametrize("lie", ["other-nonce", "wrong-end", "over-cap", "long-line", "unknown-chunk"])
def test_a_reply_that_breaks_the_protocol_is_never_believed(docker_engine, docker_workspace, lie):
    """Whatever a server answers, the host takes only a reply framed by the call's
    own nonce, within the caps it asked for; anything else retires the server."""
    from sandbox.docker_channel import Channel, ChannelBroken
    from sandbox.docker_container import container_environment

    workspace = ready(docker_workspace)
    user = docker_engine.api.inspect_container(workspace.container_id)["Config"]["User"]

    def server(how: str):
        return Channel.open(docker_engine.api, workspace.container_id, user=user,
                            environment=container_environment(), program=["perl", "-e", LYING_SERVER, how])

    honest = server("honest")
    try:
        outcome = honest.call(["true"], environment={}, deadline_s=5, max_stdout_bytes=100, max_stderr_bytes=100)
        assert (outcome.stdout, outcome.exit_code) == (b"HONEST", 0)
    finally:
        honest.close()
    liar = server(lie)
    try:
        with pytest.raises(ChannelBroken):
            liar.call(["true"], environment={}, deadline_s=5, max_stdout_bytes=100, max_stderr_bytes=100)
    finally:
        liar.close()
