"""The OpenClaw runtime's program in the sandbox: OpenClaw's own gateway plus a router adapter."""
