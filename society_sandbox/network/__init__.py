"""The wire protocol between the router and an agent, and the agent-side client."""
