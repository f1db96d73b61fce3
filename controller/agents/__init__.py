"""Runtime descriptors and roster handles; the shipped ``scripted`` runtime's controller side."""

from controller.agents.bridge import GatewayError
from controller.agents.roster import AgentHandle, Roster
from controller.agents.runtime import (
    Attachment,
    Harvest,
    Resources,
    RuntimeDescriptor,
    RuntimeDescriptorError,
    SandboxAccess,
    SecretRef,
)
from controller.agents.scripted import ScriptedGateway, ScriptedRuntime, scripted
from controller.agents.termination import (
    Completed,
    Exited,
    Failed,
    Observation,
    ProcessExit,
    Signaled,
    Termination,
)

__all__ = [
    "AgentHandle",
    "Attachment",
    "Completed",
    "Exited",
    "Failed",
    "GatewayError",
    "Harvest",
    "Observation",
    "ProcessExit",
    "Resources",
    "Roster",
    "RuntimeDescriptor",
    "RuntimeDescriptorError",
    "SandboxAccess",
    "ScriptedGateway",
    "ScriptedRuntime",
    "SecretRef",
    "Signaled",
    "Termination",
    "scripted",
]
