"""Approval gate: a human decides before a gated tool runs."""

from __future__ import annotations

from dataclasses import dataclass

from services.tools.approval_flow import ApprovalRequest, ApprovalService
from services.tools.approvals import APPROVED, DENIED, RUN_ENDED
from services.tools.catalog import ToolSpec
from services.tools.hooks.base import ALLOW, Hook, HookContext, PreResult, block

DEFAULT_APPROVAL_TIMEOUT_SECONDS = 1800.0


@dataclass(kw_only=True)
class ApprovalGate(Hook):
    """Gates tools flagged `requires_approval` (flagged_only) or every tool its globs match."""

    approvals: ApprovalService
    name: str = "approval"
    fail_closed: bool = True
    priority: int = 50
    flagged_only: bool = True
    risk_level: str = "HIGH"
    timeout_seconds: float = DEFAULT_APPROVAL_TIMEOUT_SECONDS

    def __post_init__(self) -> None:
        if not self.timeout_seconds > 0:
            raise ValueError(f"hook {self.name!r}: timeout_seconds must be > 0")

    def gates(self, spec: ToolSpec, tenant_id: str) -> bool:
        """Whether a call to `spec` by `tenant_id` waits for a human."""
        return self.applies_to(spec.name, tenant_id) and (
            spec.requires_approval or not self.flagged_only
        )

    async def pre(self, ctx: HookContext) -> PreResult:
        if not self.gates(ctx.tool, ctx.tenant_id):
            return ALLOW
        if not ctx.workflow_id:
            return block(
                f"{ctx.tool.name} needs a human's approval, which is only possible within a "
                "workflow; it was not run"
            )
        approval = await self.approvals.request_and_wait(
            ApprovalRequest(
                tenant_id=ctx.tenant_id,
                workflow_id=ctx.workflow_id,
                call_id=ctx.call_id,
                agent_id=ctx.agent_id,
                tool_name=ctx.tool.name,
                arguments=ctx.arguments,
                operation=str(ctx.arguments.get("operation", "") or "execute"),
                risk_level=self.risk_level,
                timeout_seconds=self.timeout_seconds,
            )
        )
        if approval.status == APPROVED:
            return ALLOW
        comment = f" (comment: {approval.comment})" if approval.comment else ""
        if approval.status == DENIED:
            return block(
                f"the operator denied running {ctx.tool.name}{comment}. This decision is "
                "final: do not call it again for this request; continue without it or tell "
                "the user it was not allowed"
            )
        if approval.status == RUN_ENDED:
            return block(
                f"the run ended before an operator decided, so {ctx.tool.name} was not run"
            )
        return block(
            f"no operator approved running {ctx.tool.name} within "
            f"{self.timeout_seconds:g} seconds, so it was not run; continue without it or "
            "tell the user approval is needed"
        )
