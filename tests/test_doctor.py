"""`research doctor`'s model line: whether a key is there, never the key."""

from config.schema import Config, ModelAlias
from sandbox.doctor import doctor_report


def test_doctor_names_the_missing_provider_variable():
    """With no key anywhere, doctor says which variable litellm wants."""
    report = doctor_report(Config(), {"PATH": "/usr/bin:/bin"})
    assert "no key: set ANTHROPIC_API_KEY" in report


def test_doctor_finds_keys_without_printing_them():
    """A key from the environment or from the config is reported as found, never shown."""
    report = doctor_report(Config(), {"PATH": "/usr/bin:/bin", "ANTHROPIC_API_KEY": "sk-ant-doctor-secret"})
    assert "key found (from the environment)" in report and "sk-ant-doctor-secret" not in report
    config = Config(models={"mine": ModelAlias(model="openai/x", api_key="sk-config-secret")})
    config = Config(defaults=config.defaults.__class__(model="mine"), models=config.models)
    report = doctor_report(config, {"PATH": "/usr/bin:/bin"})
    assert "key found (from the configuration)" in report and "sk-config-secret" not in report
