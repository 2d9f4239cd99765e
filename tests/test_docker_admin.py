"""`research sandbox build|status|prune` and `research doctor`, against the real engine."""

import os

import attrs
import pytest

from config.schema import Config
from dispatcher.errors import SandboxError
from sandbox.docker_admin import build_image, prune_containers, sandbox_status
from sandbox.doctor import doctor_report
from tests.support.cli import cli_environment, research
from tests.support.docker_engine import docker_engine, docker_settings  # noqa: F401

pytestmark = pytest.mark.docker

BUILD_TEST_TAG = "research-sandbox:build-test"


def test_build_produces_the_configured_image(docker_engine, docker_settings):
    """`sandbox build` builds sandbox/Dockerfile under the configured tag, with a non-root user and git."""
    import docker

    settings = attrs.evolve(docker_settings, image=BUILD_TEST_TAG)
    lines = []
    try:
        summary = build_image(settings, progress=lines.append)
        assert summary.startswith(f"built {BUILD_TEST_TAG}")
        assert lines and lines[0].startswith(f"building {BUILD_TEST_TAG}")
        image = docker_engine.images.get(BUILD_TEST_TAG)
        assert image.attrs["Config"]["User"] == "10001:10001"
        output = docker_engine.containers.run(BUILD_TEST_TAG, ["sh", "-c", "git --version; rg --version"],
                                              network_mode="none", remove=True)
        assert b"git version" in output and b"ripgrep" in output
    finally:
        try:
            docker_engine.images.remove(BUILD_TEST_TAG)
        except docker.errors.ImageNotFound:
            pass


def test_status_reports_engine_image_and_hardening(docker_settings):
    """`sandbox status` says the engine answers, the image is there and which protections apply."""
    checkup = sandbox_status(docker_settings)
    assert checkup.failed == ()
    report = checkup.text
    assert "engine: reachable at" in report
    assert " present (" in report
    for protection in ("network: none", "read-only", "capabilities: all dropped", "no-new-privileges",
                       "non-root", f"{docker_settings.pids_limit} processes", docker_settings.memory):
        assert protection in report


def test_status_says_when_the_image_is_missing(docker_settings):
    """With the image absent, status says how to build it."""
    checkup = sandbox_status(attrs.evolve(docker_settings, image="research-sandbox:absent"))
    assert "research-sandbox:absent is missing; build it with `research sandbox build`" in checkup.text
    assert checkup.failed == ("image",)


def test_status_and_commands_without_an_engine(docker_settings):
    """With no engine, status says so naming the socket, and prune fails with one sentence."""
    environ = dict(os.environ, DOCKER_HOST="unix:///nonexistent/docker.sock")
    checkup = sandbox_status(docker_settings, environ)
    assert "engine: not reachable" in checkup.text and "unix:///nonexistent/docker.sock" in checkup.text
    assert checkup.failed == ("engine", "image")
    with pytest.raises(SandboxError, match="unix:///nonexistent/docker.sock"):
        prune_containers(docker_settings, environ)


def test_prune_counts_nothing_when_nothing_is_left(docker_settings):
    """A second prune right after a first one removes nothing."""
    prune_containers(docker_settings)
    assert prune_containers(docker_settings) == 0


def test_doctor_reports_git_ripgrep_docker_and_model(docker_settings):
    """doctor names git's and ripgrep's versions, the engine, the image and the model's key state."""
    config = Config(sandbox=docker_settings)
    checkup = doctor_report(config, {**os.environ, "ANTHROPIC_API_KEY": "sk-ant-doctor-test"})
    assert checkup.failed == ()
    report = checkup.text
    assert "git: git version" in report
    assert "ripgrep: ripgrep" in report
    assert "docker: engine reachable at" in report
    assert "sandbox image: research-sandbox:" in report
    assert "model: " in report
    assert "sk-ant-doctor-test" not in report


def _config_file(tmp_path, backend: str):
    path = tmp_path / "config.toml"
    path.write_text(f'[sandbox]\nbackend = "{backend}"\n')
    return path


def test_status_and_doctor_exit_1_naming_what_is_not_ready(tmp_path):
    """Scripts can test readiness: with no engine, `sandbox status` and a Docker-backed `doctor` exit 1 naming
    the failed checks; a local-backend `doctor` does not need the engine and exits 0."""
    no_engine = {"DOCKER_HOST": "unix:///nonexistent/docker.sock", "ANTHROPIC_API_KEY": "sk-ant-test"}
    status = research("sandbox", "status", env=cli_environment(config=_config_file(tmp_path, "docker"), **no_engine))
    assert status.exit_code == 1, status.stderr
    assert "engine: not reachable" in status.stdout
    assert status.stderr.strip() == "research: not ready: engine, image (each line above says what to do)"

    doctor = research("doctor", env=cli_environment(config=_config_file(tmp_path, "docker"), **no_engine))
    assert doctor.exit_code == 1 and "not ready: docker" in doctor.stderr

    local = research("doctor", env=cli_environment(config=_config_file(tmp_path, "local"), **no_engine))
    assert local.exit_code == 0, local.stdout + local.stderr
    assert "docker: not reachable (needed only for --sandbox docker)" in local.stdout


def test_status_and_doctor_exit_0_when_ready(tmp_path, docker_settings):
    """With the engine up, the image built and a key set, both checkups pass."""
    env = cli_environment(config=_config_file(tmp_path, "docker"), ANTHROPIC_API_KEY="sk-ant-test")
    for command in (("sandbox", "status"), ("doctor",)):
        result = research(*command, env=env)
        assert result.exit_code == 0, result.stdout + result.stderr
        assert result.stderr == ""


def test_doctor_exits_1_without_the_model_key(tmp_path, monkeypatch):
    """No key for the configured model is a failed checkup: a run would fail at its first model call."""
    env = cli_environment(config=_config_file(tmp_path, "local"))
    env.pop("ANTHROPIC_API_KEY", None)
    result = research("doctor", env=env)
    assert result.exit_code == 1
    assert "no key: set ANTHROPIC_API_KEY" in result.stdout and "not ready: model" in result.stderr
