"""The run worker's side of a cluster profile: the controller Job (``controller_job``, entry
point ``main``), the export Job (``export_job``), the worker's and controller's identities and
rights (``access``), what a worker refuses (``worker_requests``) and where a
ledger lives in-cluster (``ledger_home``)."""
