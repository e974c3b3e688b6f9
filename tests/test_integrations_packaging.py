"""The adapters' extras: ``import ctxledger`` imports no framework, and an adapter whose
framework is missing fails with one line naming its extra."""

from __future__ import annotations

import subprocess
import sys

import pytest

FRAMEWORKS = ("agents", "langchain_core", "langgraph", "ctxledger.integrations.langgraph",
              "ctxledger.integrations.langchain", "ctxledger.integrations.openai_agents")


def test_import_ctxledger_imports_no_framework() -> None:
    code = ("import sys, ctxledger, ctxledger.integrations; "
            f"print([m for m in {FRAMEWORKS!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(("adapter", "blocked", "extra"), [
    ("openai_agents", "agents", "openai-agents"),
    ("langchain", "langchain_core", "langchain"),
    ("langgraph", "langgraph", "langgraph"),
])
def test_a_missing_framework_is_one_line_naming_the_extra(adapter: str, blocked: str,
                                                          extra: str) -> None:
    # A None entry in sys.modules makes the import fail as if the package were absent.
    code = (f"import sys; sys.modules[{blocked!r}] = None\n"
            "from ctxledger.integrations import MissingExtra\n"
            "try:\n"
            f"    import ctxledger.integrations.{adapter}\n"
            "except MissingExtra as exc:\n"
            "    assert isinstance(exc, ImportError)\n"
            "    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    lines = out.stdout.splitlines()
    assert len(lines) == 1, out.stdout + out.stderr
    assert f"pip install 'ctxledger[{extra}]'" in lines[0]
    assert f"ctxledger.integrations.{adapter} needs the {extra} extra" in lines[0]
