"""The researcher's module in a process of its own (the layer "the module's process").

``process`` starts it (sandboxed on the local profile) and rebuilds its ``run_spec`` from data;
``host`` is what runs there; ``serve`` answers its program's calls on ``ctx``, only those that
``exports`` lists; ``codec`` is what crosses as data and ``wire`` the channel it crosses on.
"""
