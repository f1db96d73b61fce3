"""The ``scripted`` runtime's agent program: a deterministic, seeded policy given as data.

Run it as ``python -m agent_images.scripted`` (the container entrypoint). The policy models in
``society_sandbox.runtimes.scripted`` are shared with the controller-side descriptor.
"""
