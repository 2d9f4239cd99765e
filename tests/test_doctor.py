"""`research doctor`'s model line: whether a key is there, never the key."""

import os

import attrs

from config.schema import Config, ModelAlias
from sandbox.doctor import doctor_report


def test_doctor_names_the_missing_provider_variable(monkeypatch):
    """With no key anywhere, doctor says which variable litellm wants."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    checkup = doctor_report(Config(), os.environ)
    assert "no key: set ANTHROPIC_API_KEY" in checkup.text
    assert "model" in checkup.failed


def test_doctor_finds_keys_without_printing_them(monkeypatch):
    """A key from the environment or from the config is reported as found, never shown."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-doctor-secret")
    report = doctor_report(Config(), os.environ).text
    assert "key found (from the environment)" in report and "sk-ant-doctor-secret" not in report
    config = Config(models={"mine": ModelAlias(model="openai/x", api_key="sk-config-secret")})
    config = attrs.evolve(config, defaults=attrs.evolve(config.defaults, model="mine"))
    report = doctor_report(config, os.environ).text
    assert "key found (from the configuration)" in report and "sk-config-secret" not in report
