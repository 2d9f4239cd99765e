"""Isolation every test gets: no user configuration, no network cost map."""

import os

import pytest

# litellm must never fetch its cost map from the network, in-process or in a CLI subprocess.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"


@pytest.fixture(autouse=True)
def _isolated_configuration(tmp_path_factory, monkeypatch):
    """Point the config lookup at an empty directory so a developer's own file never leaks in."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("xdg")))
    for name in ("RESEARCH_CONFIG", "RESEARCH_MODEL"):
        monkeypatch.delenv(name, raising=False)
