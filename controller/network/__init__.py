"""Wire protocol, router, agent client, experiment endpoints and the link controller.

Names load lazily: an agent program that imports ``controller.network.client`` (or the names it
needs from here) never loads the router, the kernel, Temporal or Kubernetes.
"""

from __future__ import annotations

from controller._lazy import lazy_exports

_EXPORTS = {
    # agent side
    "connect_agent": "controller.network.client",
    "AgentSession": "controller.network.client",
    "Participant": "controller.network.protocol",
    "Delivery": "controller.network.protocol",
    "ConversationRef": "controller.network.protocol",
    "SendAck": "controller.network.protocol",
    "protocol_json_schema": "controller.network.protocol",
    "PROTOCOL_VERSION": "controller.network.protocol",
    "NetworkError": "controller.network.errors",
    "ErrorCode": "controller.network.errors",
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
