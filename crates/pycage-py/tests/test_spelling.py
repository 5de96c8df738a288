"""Errors from the library name what to change in this interface's terms:
keyword arguments of pycage.Runtime, never the CLI's flags or Rust names."""

import pytest

import pycage


def test_an_interpreter_error_names_the_keyword():
    with pytest.raises(pycage.InterpreterError) as e:
        pycage.Runtime(isolation="process", python="/bin/ls")
    message = str(e.value)
    assert "pycage.Runtime(python=...)" in message, message
    assert "--python" not in message and "RuntimeConfig" not in message, message


def test_a_missing_allow_read_path_is_named_by_its_keyword():
    with pytest.raises(pycage.ConfigError) as e:
        pycage.Runtime(allow_read=["/nonexistent/venv"])
    message = str(e.value)
    assert message.startswith("allow_read /nonexistent/venv: no such file or directory"), message
    assert "--allow-read" not in message, message
