"""The platforms a profile runs on: ``local`` (one sandboxed child process per agent) and
``kubernetes`` (one Agent Sandbox pod per agent, any cluster reached through a kubeconfig).

The only places that spawn agent processes or create pods. ``local`` and ``kubernetes`` never
import each other; what both use (the local model server) sits beside them here. Each loads only
when a run asks for its profile (``controller.profiles``).
"""
