"""Wire protocol, router, agent client, experiment endpoints and the link controller.

Names load lazily: an agent program that imports ``society_sandbox.network.client`` (or the names it
needs from here) never loads the router, the kernel, Temporal or Kubernetes.
"""

from __future__ import annotations

from controller._lazy import lazy_exports

_EXPORTS = {
    # agent side
    "connect_agent": "society_sandbox.network.client",
    "AgentSession": "society_sandbox.network.client",
    "Participant": "society_sandbox.network.protocol",
    "Delivery": "society_sandbox.network.protocol",
    "ConversationRef": "society_sandbox.network.protocol",
    "SendAck": "society_sandbox.network.protocol",
    "protocol_json_schema": "society_sandbox.network.protocol",
    "PROTOCOL_VERSION": "society_sandbox.network.protocol",
    "NetworkError": "society_sandbox.network.errors",
    "ErrorCode": "society_sandbox.network.errors",
    # controller side
    "Router": "controller.network.router",
    "RouterCredential": "controller.network.router",
    "RouterTLS": "controller.network.tls",
    "MessageLimits": "controller.network.limits",
    "Network": "controller.network.endpoint",
    "Endpoint": "controller.network.endpoint",
    "Conversation": "controller.network.endpoint",
    "LinkController": "controller.network.links",
    "LinkDelivery": "controller.network.links",
    "LinkPolicy": "controller.network.links",
    "Deliver": "controller.network.links",
    "Drop": "controller.network.links",
    "Delay": "controller.network.links",
    "Hold": "controller.network.links",
    "drop_all": "controller.network.links",
    "delay_all": "controller.network.links",
    "hold_all": "controller.network.links",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
