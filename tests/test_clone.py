"""Cloning a repository into the workspace: real git, real git daemon on 127.0.0.1."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from dispatcher.errors import CloneError, UsageError
from modes.clone import clone_repository
from tests.support.git_repos import (  # noqa: F401
    TEST_BLOB_LIMIT,
    closed_port,
    fixture_git_environment,
    git,
    git_daemon,
    git_http_server,
    silent_server,
    source_repo,
)


@pytest.fixture
def dest(tmp_path) -> Path:
    """An empty workspace root to clone into."""
    root = tmp_path / "workspace"
    root.mkdir()
    return root


def commit_count(repo: Path) -> int:
    return int(git("rev-list", "--count", "HEAD", cwd=repo))


def is_shallow(repo: Path) -> bool:
    return git("rev-parse", "--is-shallow-repository", cwd=repo) == "true"


def test_local_path_clone_is_shallow_with_one_commit(source_repo, dest):
    """A local path is cloned shallowly, with the repository's files at the workspace root."""
    info = clone_repository(str(source_repo.path), dest, blob_limit=TEST_BLOB_LIMIT)
    assert info.head == source_repo.head
    assert info.shallow and is_shallow(dest)
    assert commit_count(dest) == 1
    assert info.ref == "main"
    assert info.url == source_repo.path.as_uri()
    assert (dest / "README.md").read_text().startswith("# Demo")
    assert (dest / "big.bin").stat().st_size > 1024


def test_file_url_clone_is_shallow(source_repo, dest):
    """A file:// URL is cloned shallowly too."""
    info = clone_repository(source_repo.path.as_uri(), dest)
    assert info.head == source_repo.head and info.shallow
    assert commit_count(dest) == 1


def test_git_daemon_clone_over_git_protocol(git_daemon, source_repo, dest):
    """A git:// URL served by git daemon clones shallowly."""
    info = clone_repository(git_daemon.url("source"), dest, blob_limit=TEST_BLOB_LIMIT)
    assert info.head == source_repo.head
    assert info.url == git_daemon.url("source")
    assert is_shallow(dest) and commit_count(dest) == 1


def test_depth_sets_how_many_commits_are_fetched(source_repo, dest):
    """--depth 2 fetches two commits."""
    clone_repository(str(source_repo.path), dest, depth=2)
    assert commit_count(dest) == 2


def test_full_clone_has_the_whole_history_and_every_branch(git_daemon, source_repo, dest):
    """--full fetches every commit and the other branches."""
    info = clone_repository(git_daemon.url("source"), dest, full=True)
    assert not info.shallow and not is_shallow(dest)
    assert commit_count(dest) == 3
    assert git("rev-parse", "origin/feature", cwd=dest) == source_repo.feature_commit


def test_ref_branch_is_fetched_shallowly_without_full(git_daemon, source_repo, dest):
    """--ref with a branch name checks out that branch's tip in a shallow clone."""
    info = clone_repository(git_daemon.url("source"), dest, ref="feature")
    assert info.head == source_repo.feature_commit
    assert info.ref == "feature" and info.shallow
    assert (dest / "feature.txt").exists()


@pytest.mark.parametrize(("tag", "commit_index"), [("v1.0", 2), ("v0.1", 0)], ids=["annotated", "lightweight"])
def test_ref_tag_is_fetched_shallowly_without_full(source_repo, dest, tag, commit_index):
    """--ref with a tag (annotated or lightweight) checks out the tagged commit, shallowly."""
    info = clone_repository(source_repo.path.as_uri(), dest, ref=tag)
    assert info.head == source_repo.commits[commit_index]
    assert info.shallow and commit_count(dest) == 1


def test_ref_commit_id_is_fetched_shallowly_without_full(git_daemon, source_repo, dest):
    """--ref with a full commit id is fetched on its own when the server allows it."""
    info = clone_repository(git_daemon.url("source"), dest, ref=source_repo.commits[1])
    assert info.head == source_repo.commits[1]
    assert info.shallow and commit_count(dest) == 1


def test_abbreviated_commit_id_falls_back_to_a_full_fetch(git_daemon, source_repo, dest):
    """An abbreviated commit id, which no server serves directly, still gets checked out."""
    info = clone_repository(git_daemon.url("source"), dest, ref=source_repo.commits[0][:8])
    assert info.head == source_repo.commits[0]
    assert not info.shallow


def test_server_refusing_bare_commit_ids_falls_back_to_a_full_fetch(git_daemon, source_repo, dest, monkeypatch):
    """A server that will not serve an unadvertised commit id (protocol v0) makes us fetch everything."""
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "protocol.version")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "0")
    info = clone_repository(git_daemon.url("source"), dest, ref=source_repo.commits[1])
    assert info.head == source_repo.commits[1]
    assert not info.shallow


def test_ref_with_full_checks_out_a_branch_in_the_whole_history(source_repo, dest):
    """--full --ref feature gives the whole history with the branch checked out."""
    info = clone_repository(str(source_repo.path), dest, ref="feature", full=True)
    assert info.head == source_repo.feature_commit and not info.shallow
    assert commit_count(dest) == 3


@pytest.mark.parametrize("ref", ["no-such-branch", "deadbeefdeadbeef"])
def test_missing_ref_is_a_one_sentence_clone_error(git_daemon, dest, ref):
    """A ref the server does not have fails with one sentence naming it."""
    with pytest.raises(CloneError) as caught:
        clone_repository(git_daemon.url("source"), dest, ref=ref)
    message = str(caught.value)
    assert ref in message and "\n" not in message


def test_missing_repository_on_the_server_is_a_clone_error(git_daemon, dest):
    """A repository the daemon does not serve fails with git's reason."""
    with pytest.raises(CloneError, match="no such repository"):
        clone_repository(git_daemon.url("nothing-here"), dest)


def test_unreachable_host_is_a_clone_error(closed_port, dest):
    """A port where nothing listens fails at once with a clone error, not a hang."""
    with pytest.raises(CloneError) as caught:
        clone_repository(f"git://127.0.0.1:{closed_port}/source", dest, timeout_s=10)
    assert "unable to connect" in str(caught.value) and "\n" not in str(caught.value)


def test_server_that_never_answers_times_out(silent_server, dest):
    """A server that accepts but never answers is abandoned at the git timeout."""
    with pytest.raises(CloneError, match="timed out after 2 s"):
        clone_repository(f"git://127.0.0.1:{silent_server}/source", dest, timeout_s=2)


def test_credentials_in_the_url_never_appear_in_errors(closed_port, dest):
    """A token embedded in the URL is not echoed when the clone fails."""
    with pytest.raises(CloneError) as caught:
        clone_repository(f"https://someone:s3cr3t-token@127.0.0.1:{closed_port}/x.git", dest, timeout_s=10)
    assert "s3cr3t-token" not in str(caught.value)
    assert "someone" not in str(caught.value)


def test_nonexistent_local_path_is_a_usage_error(tmp_path, dest):
    """A local path that does not exist names the URL argument."""
    with pytest.raises(UsageError, match="URL argument .* does not exist"):
        clone_repository(str(tmp_path / "missing"), dest)


def test_directory_that_is_not_a_repository_is_a_usage_error(tmp_path, dest):
    """A local directory without a repository names the URL argument."""
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(UsageError, match="is not a git repository"):
        clone_repository(str(plain), dest)


@pytest.mark.parametrize(
    "target",
    ["ext::sh -c touch% {marker}", "fd::3", "-uhack", "--upload-pack=touch {marker}", "hg::http://127.0.0.1/x",
     "unknown://127.0.0.1/x"],
)
def test_remote_helpers_and_option_like_urls_are_refused(tmp_path, dest, target):
    """URLs that would run a program or become an option are refused before git runs."""
    marker = tmp_path / "pwned"
    with pytest.raises(UsageError):
        clone_repository(target.format(marker=marker), dest)
    assert not marker.exists()
    assert list(dest.iterdir()) == []


def test_submodules_are_not_cloned(source_repo, dest):
    """A submodule entry stays an empty directory: nothing is fetched for it."""
    clone_repository(str(source_repo.path), dest, full=True)
    submodule = dest / source_repo.submodule_path
    assert not submodule.exists() or list(submodule.iterdir()) == []


def test_hooks_of_the_source_repository_do_not_run(source_repo, dest, tmp_path):
    """The source's hooks are neither copied nor run, whichever way we clone."""
    clone_repository(str(source_repo.path), dest)
    other = tmp_path / "other"
    other.mkdir()
    clone_repository(str(source_repo.path), other, ref="feature")
    assert not source_repo.hook_marker.exists()
    assert not list((dest / ".git" / "hooks").glob("*"))


def test_hooks_from_the_users_configuration_do_not_run_on_clone(source_repo, dest, tmp_path, monkeypatch):
    """core.hooksPath or a template directory in the user's git config cannot run a hook during our clone."""
    marker = tmp_path / "hook-ran"
    hooks = tmp_path / "hooks"
    template_hooks = tmp_path / "template" / "hooks"
    for directory in (hooks, template_hooks):
        directory.mkdir(parents=True)
        hook = directory / "post-checkout"
        hook.write_text(f"#!/bin/sh\necho ran >> '{marker}'\n")
        hook.chmod(0o755)
    config = tmp_path / "gitconfig"
    config.write_text(f"[core]\n\thooksPath = {hooks}\n[init]\n\ttemplateDir = {tmp_path / 'template'}\n")
    # The control: plain git with this configuration does run the hook.
    control = tmp_path / "control"
    subprocess.run(["git", "clone", "-q", str(source_repo.path), str(control)],
                   env={**fixture_git_environment(), "GIT_CONFIG_GLOBAL": str(config)}, check=True)
    assert marker.exists()
    marker.unlink()

    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    clone_repository(str(source_repo.path), dest)
    with_ref = tmp_path / "with-ref"
    with_ref.mkdir()
    clone_repository(str(source_repo.path), with_ref, ref="v0.1")
    assert not marker.exists()


@pytest.mark.parametrize("ref", [None, "feature"])
def test_http_clone_keeps_no_credentials_in_the_workspace(git_http_server, source_repo, dest, ref):
    """A token in an http URL is used for the clone but neither reported nor left in .git."""
    info = clone_repository(git_http_server.url("source", userinfo="someone:s3cr3t-token"), dest, ref=ref)
    assert info.head == (source_repo.feature_commit if ref else source_repo.head) and info.shallow
    assert info.url == git_http_server.url("source")
    assert "s3cr3t-token" not in (dest / ".git" / "config").read_text()
    assert not any("s3cr3t-token" in path.read_text(errors="replace")
                   for path in (dest / ".git").rglob("*") if path.is_file() and path.stat().st_size < 100_000)


def test_users_url_rewrites_still_apply(git_daemon, source_repo, dest, tmp_path, monkeypatch):
    """The user's own url.*.insteadOf (e.g. https to ssh) keeps working: only the repository is distrusted."""
    config = tmp_path / "gitconfig"
    config.write_text(f'[url "{git_daemon.url("")}"]\n\tinsteadOf = http://127.0.0.1:1/\n')
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    info = clone_repository("http://127.0.0.1:1/source", dest, timeout_s=20)
    assert info.head == source_repo.head
