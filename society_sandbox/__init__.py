"""The sandbox's wall: what both sides of an agent's sandbox share.

The programs inside a sandbox (``agent_images``) and the controller outside it both import this
package, and it imports nothing else of the project: the error root (``errors``), the wire
protocol and the router client (``network``), boot configuration (``boot``), the owner-API
framing (``owner_api``), the length-prefixed frames of every process channel (``framing``),
package checks (``packages``), the warm-start provision message (``warm``) and each runtime's
configuration types (``runtimes``).
"""
