"""Configuration: where it is read from, how layers combine, and how every
mistake is reported (file, line, key) — in-process and through the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from config.loader import config_path, load_config
from config.models import mode_model_name, resolve_model
from config.schema import DEFAULT_MODEL, Config
from config.secrets import resolve_secret
from config.writer import init_config, set_value, show_config
from dispatcher.errors import ConfigError, UsageError
from tests.support.cli import cli_environment, research


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


# -- where and in which order ----------------------------------------------------------------------
def test_path_follows_research_config_then_xdg_then_home():
    """$RESEARCH_CONFIG wins, then $XDG_CONFIG_HOME, then ~/.config."""
    assert config_path({"RESEARCH_CONFIG": "/a/c.toml", "XDG_CONFIG_HOME": "/x"}) == Path("/a/c.toml")
    assert config_path({"XDG_CONFIG_HOME": "/x"}) == Path("/x/research/config.toml")
    assert config_path({"HOME": "/home/u"}) == Path("/home/u/.config/research/config.toml")


def test_no_file_means_defaults(tmp_path):
    """Without a file every setting has its built-in default."""
    config = load_config(None, {"XDG_CONFIG_HOME": str(tmp_path)})
    assert config == Config() and config.defaults.model == DEFAULT_MODEL


def test_explicit_missing_file_is_an_error(tmp_path):
    """A file named by $RESEARCH_CONFIG that does not exist is reported, not ignored."""
    with pytest.raises(ConfigError, match="no such configuration file"):
        load_config(None, {"RESEARCH_CONFIG": str(tmp_path / "nope.toml")})


def test_environment_beats_the_file(tmp_path):
    """RESEARCH_MODEL overrides [defaults] model; the file overrides built-in defaults."""
    path = write(tmp_path, '[defaults]\nmodel = "openai/gpt-4o"\nmax_steps = 9\n')
    assert load_config(path, {}).defaults.model == "openai/gpt-4o"
    config = load_config(path, {"RESEARCH_MODEL": "anthropic/claude-x"})
    assert config.defaults.model == "anthropic/claude-x" and config.defaults.max_steps == 9


def test_sandbox_backend_is_one_setting_in_two_places(tmp_path):
    """[defaults] sandbox and [sandbox] backend agree, and a contradiction is refused."""
    assert load_config(write(tmp_path, '[defaults]\nsandbox = "docker"\n'), {}).sandbox.backend == "docker"
    assert load_config(write(tmp_path, '[sandbox]\nbackend = "docker"\n'), {}).defaults.sandbox == "docker"
    with pytest.raises(ConfigError, match=r"config.toml:4: 'sandbox.backend' is 'local' but defaults.sandbox"):
        load_config(write(tmp_path, '[defaults]\nsandbox = "docker"\n[sandbox]\nbackend = "local"\n'), {})


def test_per_mode_model_overrides_the_default(tmp_path):
    """[repo] model applies to repo mode only."""
    config = load_config(write(tmp_path, '[repo]\nmodel = "openai/gpt-4o-mini"\n'), {})
    assert mode_model_name(config, "repo") == "openai/gpt-4o-mini"
    assert mode_model_name(config, "web") == DEFAULT_MODEL


# -- every mistake names file, line and key ---------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ('[defaults]\nmodel = "x"\nmax_steps = = 3\n', r"config.toml:3: invalid TOML"),
    ('[web]\nserch = "brave"\n', r"config.toml:2: unknown key 'web.serch' \(did you mean 'web.search'\?\)"),
    ('[webb]\nsearch = "brave"\n', r"config.toml:1: unknown key 'webb' \(did you mean 'web'\?\)"),
    ('[defaults]\n\nmax_steps = "ten"\n', r"config.toml:3: 'defaults.max_steps' must be a whole number, not \"ten\""),
    ('[defaults]\nmax_steps = 0\n', r"config.toml:2: 'defaults.max_steps' must be greater than 0"),
    ('[defaults]\ncleanup = "no"\n', r"config.toml:2: 'defaults.cleanup' must be true or false"),
    ('[web]\nsearch = "bing"\n', r"config.toml:2: 'web.search' must be one of duckduckgo, searxng"),
    ('[web]\nallowed_hosts = "a"\n', r"config.toml:2: 'web.allowed_hosts' must be a list of strings"),
    ('[web.brave]\napi_kee = "x"\n', r"config.toml:2: unknown key 'web.brave.api_kee' \(did you mean 'web.brave.api_key'\?\)"),
    ('[models.fast]\napi_base = "http://x"\n', r"config.toml:1: 'models.fast' needs a 'model' key"),
    ('[models.fast]\nmodel = "openai/x"\ncontext_window = true\n',
     r"config.toml:3: 'models.fast.context_window' must be a whole number, not true"),
    ('[sandbox]\nmemory = "lots"\n',
     r"config.toml:2: 'sandbox.memory' must be a size such as \"512m\" or \"2g\" \(units b, k, m, g\), not \"lots\""),
    ('[sandbox]\nmemory = "1k"\n', r"config.toml:2: 'sandbox.memory' must be at least 6m, not \"1k\""),
    ('[sandbox]\ntmp_size = "1.5m"\n', r"config.toml:2: 'sandbox.tmp_size' must be a size such as"),
])
def test_mistakes_name_the_file_line_and_key(tmp_path, text, expected):
    """Broken TOML, unknown keys and tables, wrong types and bad choices each point at the exact place."""
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=expected) as raised:
        load_config(path, {})
    assert str(raised.value).startswith(str(path))


# -- secrets and models ----------------------------------------------------------------------------
def test_secret_references_resolve():
    """$VAR, ${VAR}, !command, a set env name and a literal each resolve as documented."""
    env = {"KEY": "from-env", "PATH": "/usr/bin:/bin"}
    assert resolve_secret("$KEY", key="k", environ=env) == "from-env"
    assert resolve_secret("${KEY}", key="k", environ=env) == "from-env"
    assert resolve_secret("!echo '  from-command  '", key="k", environ=env) == "from-command"
    assert resolve_secret("KEY", key="k", environ=env) == "from-env"
    assert resolve_secret("sk-literal", key="k", environ=env) == "sk-literal"
    assert resolve_secret(None, key="k", environ=env) is None


def test_failing_secret_command_names_the_key_not_the_output():
    """A command that fails is reported by key and exit code; its output is never echoed."""
    with pytest.raises(ConfigError, match=r"the command for models.x.api_key failed with exit code 3") as raised:
        resolve_secret("!echo sekret; exit 3", key="models.x.api_key", environ={"PATH": "/usr/bin:/bin"})
    assert "sekret" not in str(raised.value)
    with pytest.raises(ConfigError, match=r"models.x.api_key refers to \$MISSING"):
        resolve_secret("$MISSING", key="models.x.api_key", environ={})


def test_model_names_resolve_to_litellm_strings(tmp_path):
    """Aliases carry their endpoint and resolved key; provider:model is normalised; tags keep their colon."""
    path = write(tmp_path, '[models.local]\nmodel = "openai:qwen"\napi_base = "http://127.0.0.1:9/v1"\n'
                           'api_key = "$LOCAL_KEY"\nextra_headers = { X-Team = "TEAM" }\n')
    config = load_config(path, {})
    spec = resolve_model("local", config, {"LOCAL_KEY": "k1", "TEAM": "research"})
    assert (spec.litellm_model, spec.api_base, spec.api_key) == ("openai/qwen", "http://127.0.0.1:9/v1", "k1")
    assert spec.extra_headers == {"X-Team": "research"}
    assert resolve_model("anthropic:claude-sonnet-4-5", config, {}).litellm_model == "anthropic/claude-sonnet-4-5"
    assert resolve_model("ollama/llama3:8b", config, {}).litellm_model == "ollama/llama3:8b"
    with pytest.raises(UsageError, match=r"unknown model 'gpt': not an alias in \[models\] \(local\)"):
        resolve_model("gpt", config, {})


# -- writing ---------------------------------------------------------------------------------------
def test_init_writes_a_starter_that_loads_and_refuses_to_overwrite(tmp_path):
    """init writes a commented file that loads cleanly, and keeps an existing one without --force."""
    path = tmp_path / "research" / "config.toml"
    init_config(path)
    assert "# research configuration" in path.read_text()
    assert load_config(path, {}) == Config()
    with pytest.raises(ConfigError, match="already exists; pass --force"):
        init_config(path)
    init_config(path, force=True)


def test_set_validates_before_writing_and_keeps_the_file_on_error(tmp_path):
    """set writes valid values (mode 0600) and leaves the file byte-identical when a value is wrong."""
    path = tmp_path / "config.toml"
    set_value(path, "defaults.max_steps", "7")
    set_value(path, "models.fast.model", "openai/gpt-4o-mini")
    set_value(path, "web.allowed_hosts", '["docs.internal:8080"]')
    config = load_config(path, {})
    assert config.defaults.max_steps == 7 and config.models["fast"].model == "openai/gpt-4o-mini"
    assert config.web.allowed_hosts == ("docs.internal:8080",)
    assert path.stat().st_mode & 0o777 == 0o600
    before = path.read_bytes()
    for key, value in (("defaults.max_steps", "ten"), ("defaults.max_stepz", "3"), ("web.search", "bing")):
        with pytest.raises(ConfigError):
            set_value(path, key, value)
    assert path.read_bytes() == before


def test_set_keeps_comments_order_and_untouched_values(tmp_path):
    """set on the commented starter changes only the value asked for: every comment,
    the key order and commented-out examples stay as the user saw them."""
    path = tmp_path / "config.toml"
    init_config(path)
    before = path.read_text()
    set_value(path, "defaults.max_steps", "40")
    set_value(path, "web.searxng.url", "http://localhost:8888")
    after = path.read_text()
    assert after.replace("max_steps = 40", "max_steps = 25").startswith(before)
    assert after.count("#") == before.count("#")
    assert "sandbox = \"local\"        # or \"docker\"" in after
    config = load_config(path, {})
    assert config.defaults.max_steps == 40 and config.web.searxng.url == "http://localhost:8888"


def test_show_masks_literal_keys_but_shows_references(tmp_path):
    """show never prints a literal key; $VAR and !command references are shown as written."""
    path = write(tmp_path, '[models.a]\nmodel = "openai/x"\napi_key = "sk-secret-literal"\n'
                           '[models.b]\nmodel = "openai/y"\napi_key = "$B_KEY"\n')
    shown = show_config(load_config(path, {}))
    assert "sk-secret-literal" not in shown and 'api_key = "***"' in shown and 'api_key = "$B_KEY"' in shown


# -- through the CLI -------------------------------------------------------------------------------
def test_cli_config_set_then_show_and_path(tmp_path):
    """`research config set` then `show` round-trips; `path` prints the file in use."""
    path = tmp_path / "c.toml"
    env = cli_environment(config=path)
    assert research("config", "set", "defaults.max_steps", "7", env=env).exit_code == 0
    shown = research("config", "show", env=env)
    assert shown.exit_code == 0 and "max_steps = 7" in shown.stdout
    assert research("config", "path", env=env).stdout.strip() == str(path)


def test_cli_broken_config_exits_2_with_file_and_line(tmp_path):
    """A run with a broken config file stops before any work: exit 2, file:line and key, no traceback."""
    path = write(tmp_path, '[defaults]\nmax_steps = "many"\n')
    result = research("repo", str(tmp_path), "q", env=cli_environment(config=path))
    assert result.exit_code == 2
    assert result.stderr == f"research: {path}:2: 'defaults.max_steps' must be a whole number, not \"many\"\n"


def test_cli_bad_set_exits_2_naming_the_key(tmp_path):
    """`research config set` with an unknown key exits 2 with a suggestion."""
    result = research("config", "set", "defaults.modle", "x", env=cli_environment(config=tmp_path / "c.toml"))
    assert result.exit_code == 2 and "did you mean 'defaults.model'" in result.stderr
