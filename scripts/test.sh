#!/usr/bin/env bash
# Set up and run the whole test suite on a fresh Debian machine:
#   scripts/test.sh [pytest args...]
# Creates .venv with the project and its test extras, starts a Docker engine and
# builds the sandbox image offline when run as root on a machine without one,
# then runs pytest. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'

# Tests need git (real repositories, git daemon); install it if the machine lacks it.
if ! command -v git >/dev/null && [ "$(id -u)" = 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq git
fi

# The Docker tests need an engine and the sandbox image; as root we can provide both.
if [ "$(id -u)" = 0 ] && [ -f scripts/setup-docker.sh ]; then
  bash scripts/setup-docker.sh
fi

# Never let litellm fetch its cost map from the network.
export LITELLM_LOCAL_MODEL_COST_MAP=True
set +e
.venv/bin/python -m pytest "$@"
status=$?
set -e
# pytest's exit 5 means no test ran: that is a failure for us, not a pass.
if [ "$status" = 5 ]; then
  echo "scripts/test.sh: pytest collected no tests" >&2
  exit 1
fi
exit "$status"
