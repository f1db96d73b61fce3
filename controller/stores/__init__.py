"""Where a finished run's evidence goes beyond the machine that made it: ``gcs`` (a GCS bucket)."""
