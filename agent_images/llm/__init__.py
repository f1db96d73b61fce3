"""The ``llm`` runtime's agent program: a chat model's turns over the router, through the run's
model gateway.

Run it as ``python -m agent_images.llm`` (the container entrypoint). The configuration models in
``agent_images.llm.config`` are shared with the controller-side descriptor.
"""
