"""Runtime descriptors and roster handles; the ``scripted``, ``peer`` and ``byo`` runtimes'
controller side.

``llm`` and ``openclaw`` live in ``controller.agents.llm`` / ``controller.agents.openclaw`` (their
imports are heavier).
"""

from controller.agents.bridge import OwnerError
from controller.agents.byo import BYOOwner, BYORuntime, byo
from controller.agents.peer import PeerObservation, PeerObservations, PeerRuntime, peer
from controller.agents.roster import AgentHandle, OwnerTypeError, Roster
from controller.agents.runtime import (
    Attachment,
    Harvest,
    Resources,
    RuntimeDescriptor,
    RuntimeDescriptorError,
    SandboxAccess,
    SecretRef,
)
from controller.agents.scripted import ScriptedOwner, ScriptedRuntime, scripted
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
    "BYOOwner",
    "BYORuntime",
    "Completed",
    "Exited",
    "Failed",
    "Harvest",
    "Observation",
    "OwnerError",
    "OwnerTypeError",
    "PeerObservation",
    "PeerObservations",
    "PeerRuntime",
    "ProcessExit",
    "Resources",
    "Roster",
    "RuntimeDescriptor",
    "RuntimeDescriptorError",
    "SandboxAccess",
    "ScriptedOwner",
    "ScriptedRuntime",
    "SecretRef",
    "Signaled",
    "Termination",
    "byo",
    "peer",
    "scripted",
]
