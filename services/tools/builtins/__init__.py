"""Built-in tools shipped with the tool host."""

from __future__ import annotations

from dataclasses import dataclass, field

from services.tools.builtins.calculator import Calculator
from services.tools.builtins.datetime_tool import DateTimeTool
from services.tools.builtins.file_ops import FileOps
from services.tools.builtins.http import HttpRequest, SafeFetcher, WebFetch
from services.tools.builtins.json_transform import JsonTransform
from services.tools.builtins.python_exec import PythonExec
from services.tools.builtins.sandbox import Sandbox, SandboxLimits
from services.tools.builtins.text_utils import TextUtils
from services.tools.catalog import Tool
from services.tools.netguard import AddressPolicy
from services.tools.workspace import Workspaces


@dataclass(frozen=True)
class BuiltinConfig:
    """What the built-ins that touch the world need; None/False leaves them out."""

    workspaces: Workspaces | None = None
    http_policy: AddressPolicy | None = None
    http_max_bytes: int = 2 * 1024 * 1024
    http_timeout_seconds: float = 20.0
    # A prepared container (Sandbox.prepare) enables python_exec; it needs the workspaces.
    python_sandbox: Sandbox | None = None
    python_limits: SandboxLimits = field(default_factory=SandboxLimits)


def default_tools(config: BuiltinConfig | None = None) -> list[Tool]:
    """Fresh instances of the built-in tools, in catalog order.

    Without a config only the pure tools (no files, network or processes) are included.
    """
    tools: list[Tool] = [Calculator(), DateTimeTool(), JsonTransform(), TextUtils()]
    if config is None:
        return tools
    if config.workspaces is not None:
        tools.append(FileOps(config.workspaces))
    if config.http_policy is not None:
        fetcher = SafeFetcher(
            config.http_policy, config.http_max_bytes, config.http_timeout_seconds
        )
        tools += [
            HttpRequest(fetcher, config.http_max_bytes),
            WebFetch(fetcher, config.http_max_bytes),
        ]
    if config.python_sandbox is not None and config.workspaces is not None:
        tools.append(PythonExec(config.python_sandbox, config.workspaces, config.python_limits))
    return tools
