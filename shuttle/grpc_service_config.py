"""The service config every client channel carries: round_robin over all of a target's
addresses, and gRPC's own retries of the calls that are safe to make twice.

gRPC retries a call only while no response has come back (for a stream, before its first
message), so a stream a server drops later is resumed by its caller (events_client/follow.py,
commands.py, append_stream.py). A retry goes to the next address round_robin picks, so a
replica that stops mid-call is replaced by another one.
"""

from __future__ import annotations

import json

# Methods a second attempt cannot change the outcome of, by full name. Left out on purpose:
# EventService.CreateWorkflow (a new workflow each time), DeleteWorkflows and
# ToolService.DeleteWorkflowData (their answers count what this call deleted),
# FollowCommands and AppendStream (long-lived, resumed by their callers),
# ToolService.Execute (a tool that did run would run twice, until calls are recorded by id),
# DecideApproval, ExecutorService.StartRun, Run, Control and Interrupt (each acts once), and
# every ToolProvider method (someone else's server; their callers decide), and health checks
# (a readiness answer says how a backend is now; probes ask again themselves).
IDEMPOTENT_METHODS: dict[str, tuple[str, ...]] = {
    # Reads, and the writes that are idempotent by design: Append through (producer_id,
    # batch_seq), which the service answers with the first seqs when repeated, RenewLease,
    # which the same owner may take again, and ReleaseLease, answered alike when repeated.
    # Not ClaimRuns: a resent claim would take more runs than the caller hears of.
    "shuttle.v1.EventService": (
        "GetWorkflow",
        "List",
        "Stream",
        "StreamBatches",
        "Append",
        "RenewLease",
        "ReleaseLease",
    ),
    "shuttle.v1.ToolService": ("ListTools", "ListApprovals"),
    # The planner keeps no state: an answer depends on the request only. A call the planner
    # had started when its connection broke costs a second model call.
    "shuttle.v1.PlannerService": ("StructuredCall", "SelectTools", "Plan", "AnalyzePlan", "Route"),
    "shuttle.v1.ExecutorService": ("GetRun",),
}

# Five attempts (gRPC's most) about 0.1, 0.2, 0.4, 0.8 s apart, each less a random share:
# enough to pass over a stopped replica to a live one, or a restart of a single one.
RETRY_POLICY = {
    "maxAttempts": 5,
    "initialBackoff": "0.1s",
    "maxBackoff": "1s",
    "backoffMultiplier": 2,
    "retryableStatusCodes": ["UNAVAILABLE"],
}


def service_config() -> str:
    """The service config JSON of Shuttle's channels."""
    return json.dumps(
        {
            "loadBalancingConfig": [{"round_robin": {}}],
            "methodConfig": [
                {
                    "name": [
                        {"service": service, "method": method}
                        for service, methods in IDEMPOTENT_METHODS.items()
                        for method in methods
                    ],
                    "retryPolicy": RETRY_POLICY,
                }
            ],
        },
        separators=(",", ":"),
    )


SERVICE_CONFIG_OPTIONS = [
    ("grpc.service_config", service_config()),
    # Ours, not one a DNS TXT record might carry.
    ("grpc.service_config_disable_resolution", 1),
    ("grpc.enable_retries", 1),
    # An attempt's request is kept for a retry up to this size (the default, 256 KiB, would
    # leave a large Append unretried); the channel's in-flight total is bounded too.
    ("grpc.per_rpc_retry_buffer_size", 16 * 1024 * 1024),
    ("grpc.retry_buffer_size", 64 * 1024 * 1024),
]
