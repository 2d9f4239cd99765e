"""The in-container half of the Docker workspace: one POSIX sh script.

Every Workspace method is one run of this script (through a command server,
`sandbox.docker_channel`, or a plain `docker exec`), so each method does its
path check and its work in the same round trip.
Paths are resolved *inside the container* with `realpath -m`, so a symlink in
a hostile repository resolves against the container's filesystem, never the
host's, and the result must be /workspace or below it. The script needs only sh,
coreutils and findutils.

Protocol: stdout starts with 'O' followed by the operation's output, or with
'E' followed by one of the status codes below and nothing else. For `run`, the
'O' is written just before the command replaces the script, so whatever
follows it is the command's own stdout and cannot be mistaken for a status.
"""

from __future__ import annotations

from sandbox.docker_container import WORKSPACE_PATH

OUTSIDE = 10
MISSING = 11
IS_DIRECTORY = 12
NOT_REGULAR = 13
UNREADABLE = 14
NOT_DIRECTORY = 15
NO_PROGRAM = 16

SCRIPT = r"""
ws=%(workspace)s
fail() { printf 'E%%s' "$1"; exit 0; }
# inside REL: set $real to REL's canonical absolute form, every symlink followed
# inside this container, and fail unless it is the workspace or below it. The
# trailing x keeps a name that ends in a newline intact through $(...).
inside() {
  real=$(realpath -m -- "$ws/$1" 2>/dev/null && echo x) || fail %(UNREADABLE)d
  real=${real%%?x}
  case $real in "$ws"|"$ws"/*) ;; *) fail %(OUTSIDE)d ;; esac
}
op=$1; shift
case $op in
resolve)
  inside "$1"; printf 'O%%s' "$real" ;;
read)  # read REL OFFSET MAX: "O<size>\n" then at most MAX bytes from OFFSET
  inside "$1"
  [ -e "$real" ] || fail %(MISSING)d
  [ -d "$real" ] && fail %(IS_DIRECTORY)d
  [ -f "$real" ] || fail %(NOT_REGULAR)d
  [ -r "$real" ] || fail %(UNREADABLE)d
  size=$(stat -c %%s -- "$real") || fail %(UNREADABLE)d
  printf 'O%%s\n' "$size"
  tail -c "+$(($2 + 1))" -- "$real" | head -c "$3" ;;
list)  # list REL: "O" then "<type> <size> <path>\0" per child
  inside "$1"
  [ -e "$real" ] || fail %(MISSING)d
  [ -d "$real" ] || fail %(NOT_DIRECTORY)d
  { [ -r "$real" ] && [ -x "$real" ]; } || fail %(UNREADABLE)d
  printf 'O'
  find "$real" -mindepth 1 -maxdepth 1 -printf '%%y %%s %%p\0' ;;
walk)  # walk REL MAX: like list, for everything below, never entering .git; at most MAX entries
  inside "$1"
  [ -d "$real" ] || fail %(NOT_DIRECTORY)d
  printf 'O'
  find "$real" -mindepth 1 \( -name .git -type d -prune \) -o -printf '%%y %%s %%p\0' 2>/dev/null \
    | head -z -n "$2" ;;
parent)  # parent REL: create REL's parent directories, print REL's canonical form
  inside "$1"; file=$real
  { [ "$file" = "$ws" ] || [ -d "$file" ]; } && fail %(IS_DIRECTORY)d
  mkdir -p -- "${file%%/*}" 2>/dev/null || fail %(UNREADABLE)d
  # Nothing created on the way may have turned the path into another one.
  inside "${file#"$ws"/}"; [ "$real" = "$file" ] || fail %(OUTSIDE)d
  printf 'O%%s' "$file" ;;
run)  # run CWD SECONDS ARGV...: the command's exit code and output are its own
  inside "$1"
  { [ -d "$real" ] && cd -- "$real"; } || fail %(NOT_DIRECTORY)d
  limit=$2; shift 2
  case $1 in -*|'') fail %(NO_PROGRAM)d ;; esac
  command -v "$1" >/dev/null 2>&1 || fail %(NO_PROGRAM)d
  printf 'O'
  exec timeout -s KILL "$limit" "$@" ;;
*)
  exit 2 ;;
esac
""" % dict(
    workspace=WORKSPACE_PATH, OUTSIDE=OUTSIDE, MISSING=MISSING, IS_DIRECTORY=IS_DIRECTORY,
    NOT_REGULAR=NOT_REGULAR, UNREADABLE=UNREADABLE, NOT_DIRECTORY=NOT_DIRECTORY, NO_PROGRAM=NO_PROGRAM,
)


def argv(op: str, *args: str) -> list[str]:
    return ["sh", "-c", SCRIPT, "sh", op, *args]


def split_reply(stdout: bytes) -> tuple[int | None, bytes]:
    """(status code, b"") for an 'E' reply, (None, payload) for an 'O' reply.

    Raises ValueError for anything else (the script did not run as written).
    """
    if stdout[:1] == b"O":
        return None, stdout[1:]
    if stdout[:1] == b"E" and stdout[1:].isdigit():
        return int(stdout[1:]), b""
    raise ValueError("the sandbox helper gave no reply")


def relative(real: bytes) -> str:
    """The workspace-relative form of a canonical in-container path."""
    from os import fsdecode

    text = fsdecode(real)
    if text == WORKSPACE_PATH:
        return "."
    return text[len(WORKSPACE_PATH) + 1:]
