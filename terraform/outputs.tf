output "cluster_name" {
  description = "The GKE cluster (gcloud container clusters get-credentials NAME --region REGION)."
  value       = google_container_cluster.society.name
}

output "region" {
  value = var.region
}

output "registry" {
  description = "Where images are pushed: REGISTRY/society-runner, REGISTRY/scripted, ..."
  value       = "${var.region}-docker.pkg.dev/${var.project_id}/${google_artifact_registry_repository.images.repository_id}"
}

output "ledger_bucket" {
  value = google_storage_bucket.ledgers.name
}

output "ledger_writer" {
  description = "The Google service account the run worker acts as (Workload Identity)."
  value       = google_service_account.ledger_writer.email
}

# Values for helm/society-runner, layered after values-gke.yaml: nothing is copied by hand.
output "helm_values" {
  description = "tofu output -raw helm_values > gke-values.yaml"
  value = yamlencode({
    worker = {
      image = {
        repository = "${var.region}-docker.pkg.dev/${var.project_id}/${google_artifact_registry_repository.images.repository_id}/society-runner"
      }
      serviceAccountAnnotations = {
        "iam.gke.io/gcp-service-account" = google_service_account.ledger_writer.email
      }
      nodeSelector = { (local.system_pool_label.key) = local.system_pool_label.value }
    }
    agents = {
      nodeSelector = { (local.agents_pool_label.key) = local.agents_pool_label.value }
      tolerations  = local.agents_tolerations
    }
    # Sized to the agents pool at its autoscaling maximum, so Kueue admits what the autoscaler
    # can grow into.
    agentQueue = {
      cpu    = tostring(local.agents_quota_cpu)
      memory = local.agents_quota_memory
    }
    ledgerExport = {
      bucket = google_storage_bucket.ledgers.name
    }
  })
}
