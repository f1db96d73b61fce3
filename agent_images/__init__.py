"""Container entrypoints of the shipped runtimes, one package per runtime.

Code here runs inside an agent's sandbox: it imports only the wire protocol and the agent-side
client from ``controller.network``, never the kernel, the router or a platform.
"""
