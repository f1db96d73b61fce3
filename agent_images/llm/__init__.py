"""The ``llm`` runtime's agent program: a chat model's turns over the router, through the run's
model gateway.

Run it as ``python -m agent_images.llm`` (the container entrypoint). The configuration models in
``society_sandbox.runtimes.llm`` are shared with the controller-side descriptor.
"""
