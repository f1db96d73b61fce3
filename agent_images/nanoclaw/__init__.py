"""The NanoClaw runtime's agent program (see ``agent``)."""
