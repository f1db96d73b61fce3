"""Cluster profiles: the static checks of the kind and GKE profiles' checked-in contracts, and
the export of a run's ledger to a GCS bucket (the GKE profile's durable store)."""
