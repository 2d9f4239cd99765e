"""`research sandbox build|status|prune` and `research doctor`, against the real engine."""

import os

import attrs
import pytest

from config.schema import Config
from dispatcher.errors import SandboxError
from sandbox.docker_admin import build_image, prune_containers, sandbox_status
from sandbox.doctor import doctor_report
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
    report = sandbox_status(docker_settings)
    assert "engine: reachable at" in report
    assert " present (" in report
    for protection in ("network: none", "read-only", "capabilities: all dropped", "no-new-privileges",
                       "non-root", f"{docker_settings.pids_limit} processes", docker_settings.memory):
        assert protection in report


def test_status_says_when_the_image_is_missing(docker_settings):
    """With the image absent, status says how to build it."""
    report = sandbox_status(attrs.evolve(docker_settings, image="research-sandbox:absent"))
    assert "research-sandbox:absent is missing; build it with `research sandbox build`" in report


def test_status_and_commands_without_an_engine(docker_settings):
    """With no engine, status says so naming the socket, and prune fails with one sentence."""
    environ = dict(os.environ, DOCKER_HOST="unix:///nonexistent/docker.sock")
    assert "engine: not reachable" in sandbox_status(docker_settings, environ)
    with pytest.raises(SandboxError, match="unix:///nonexistent/docker.sock"):
        prune_containers(docker_settings, environ)


def test_prune_counts_nothing_when_nothing_is_left(docker_settings):
    """A second prune right after a first one removes nothing."""
    prune_containers(docker_settings)
    assert prune_containers(docker_settings) == 0


def test_doctor_reports_git_ripgrep_docker_and_model(docker_settings):
    """doctor names git's and ripgrep's versions, the engine, the image and the model's key state."""
    config = Config(sandbox=docker_settings)
    report = doctor_report(config, {**os.environ, "ANTHROPIC_API_KEY": "sk-ant-doctor-test"})
    assert "git: git version" in report
    assert "ripgrep: ripgrep" in report
    assert "docker: engine reachable at" in report
    assert "sandbox image: research-sandbox:" in report
    assert "model: " in report
    assert "sk-ant-doctor-test" not in report
