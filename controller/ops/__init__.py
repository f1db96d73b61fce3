"""Operator tooling: ``society cluster up|down`` (``cluster``) and ``society profile check``
(``checks``). It reads the repository's checked-in chart, manifests and Terraform, so it runs from
a checkout (``repository``)."""
