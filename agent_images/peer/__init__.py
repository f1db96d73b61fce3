"""The ``peer`` runtime's agent program: an evaluation peer whose policy is Python code."""
