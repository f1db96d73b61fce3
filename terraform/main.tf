# The GKE profile: a regional GKE Standard cluster with private nodes, Workload Identity and
# Dataplane V2 (so the runs' NetworkPolicies are enforced), a system pool and an autoscaling
# agents pool reserved by label and taint, an Artifact Registry repository for the images, a
# GCS bucket for ledgers, and least-privilege service accounts.

locals {
  # The agents pool's label and taint (reserved for agents' pods).
  agents_pool_label = { key = "society.run/pool", value = "agents" }
  agents_pool_taint = { key = "society.run/pool", value = "agents", effect = "NO_SCHEDULE" }
  system_pool_label = { key = "society.run/pool", value = "system" }
  # What agents' pods tolerate (Kubernetes spelling); `society profile check gke` asserts that it
  # matches agents_pool_taint, and outputs.tf hands it to the chart.
  agents_tolerations = [{ key = "society.run/pool", operator = "Equal", value = "agents", effect = "NoSchedule" }]

  worker_ksa          = "society-run-worker"
  workload_pool       = "${var.project_id}.svc.id.goog"
  agents_max_nodes    = var.agents_max_nodes_per_zone * length(var.zones)
  agents_quota_cpu    = floor(local.agents_max_nodes * var.agents_node_cpu)
  agents_quota_memory = "${floor(local.agents_max_nodes * var.agents_node_memory_gib)}Gi"
}

# ---- network -------------------------------------------------------------------------------

resource "google_compute_network" "society" {
  name                    = "${var.name}-network"
  auto_create_subnetworks = false
}

resource "google_compute_subnetwork" "nodes" {
  name                     = "${var.name}-nodes"
  network                  = google_compute_network.society.id
  region                   = var.region
  ip_cidr_range            = "10.10.0.0/20"
  private_ip_google_access = true # private nodes reach Artifact Registry and GCS

  secondary_ip_range {
    range_name    = "pods"
    ip_cidr_range = "10.20.0.0/14"
  }
  secondary_ip_range {
    range_name    = "services"
    ip_cidr_range = "10.24.0.0/20"
  }
}

# Private nodes have no public address: Cloud NAT gives them egress (model APIs, Temporal Cloud).
resource "google_compute_router" "society" {
  name    = "${var.name}-router"
  network = google_compute_network.society.id
  region  = var.region
}

resource "google_compute_router_nat" "society" {
  name                               = "${var.name}-nat"
  router                             = google_compute_router.society.name
  region                             = var.region
  nat_ip_allocate_option             = "AUTO_ONLY"
  source_subnetwork_ip_ranges_to_nat = "ALL_SUBNETWORKS_ALL_IP_RANGES"
}

# ---- cluster -------------------------------------------------------------------------------

resource "google_container_cluster" "society" {
  name     = "${var.name}-cluster"
  location = var.region # regional: a control plane replicated across the region's zones

  network         = google_compute_network.society.id
  subnetwork      = google_compute_subnetwork.nodes.id
  node_locations  = var.zones
  networking_mode = "VPC_NATIVE"

  # Dataplane V2 (Cilium) enforces NetworkPolicy; no separate network-policy add-on.
  datapath_provider = "ADVANCED_DATAPATH"

  ip_allocation_policy {
    cluster_secondary_range_name  = "pods"
    services_secondary_range_name = "services"
  }

  private_cluster_config {
    enable_private_nodes    = true
    enable_private_endpoint = false
    master_ipv4_cidr_block  = var.master_ipv4_cidr_block
  }

  master_authorized_networks_config {
    dynamic "cidr_blocks" {
      for_each = var.master_authorized_cidrs
      content {
        cidr_block = cidr_blocks.value
      }
    }
  }

  workload_identity_config {
    workload_pool = local.workload_pool
  }

  min_master_version = var.kubernetes_version
  release_channel {
    channel = var.release_channel
  }

  # The pools below replace the default one.
  remove_default_node_pool = true
  initial_node_count       = 1
  deletion_protection      = true
}

resource "google_container_node_pool" "system" {
  name           = "system"
  cluster        = google_container_cluster.society.id
  node_locations = var.zones
  node_count     = 1

  node_config {
    machine_type    = var.system_machine_type
    service_account = google_service_account.nodes.email
    oauth_scopes    = ["https://www.googleapis.com/auth/cloud-platform"]
    labels          = { (local.system_pool_label.key) = local.system_pool_label.value }

    workload_metadata_config {
      mode = "GKE_METADATA"
    }
    shielded_instance_config {
      enable_secure_boot = true
    }
  }
}

resource "google_container_node_pool" "agents" {
  name           = "agents"
  cluster        = google_container_cluster.society.id
  node_locations = var.zones

  autoscaling {
    min_node_count = 0
    max_node_count = var.agents_max_nodes_per_zone
  }

  node_config {
    machine_type    = var.agents_machine_type
    service_account = google_service_account.nodes.email
    oauth_scopes    = ["https://www.googleapis.com/auth/cloud-platform"]
    labels          = { (local.agents_pool_label.key) = local.agents_pool_label.value }

    taint {
      key    = local.agents_pool_taint.key
      value  = local.agents_pool_taint.value
      effect = local.agents_pool_taint.effect
    }

    workload_metadata_config {
      mode = "GKE_METADATA"
    }
    shielded_instance_config {
      enable_secure_boot = true
    }
  }
}

# ---- images and ledgers --------------------------------------------------------------------

resource "google_artifact_registry_repository" "images" {
  repository_id = "${var.name}-images"
  location      = var.region
  format        = "DOCKER"
  description   = "Society Runner images (worker, controller, agents), pulled by digest."
}

resource "google_storage_bucket" "ledgers" {
  name                        = var.ledger_bucket
  location                    = var.region
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = false

  versioning {
    enabled = true
  }
}

# ---- identities ----------------------------------------------------------------------------

# The nodes: write logs and metrics, pull images from this repository; nothing else.
resource "google_service_account" "nodes" {
  account_id   = "${var.name}-nodes"
  display_name = "Society Runner GKE nodes"
}

resource "google_project_iam_member" "nodes" {
  for_each = toset([
    "roles/logging.logWriter",
    "roles/monitoring.metricWriter",
    "roles/monitoring.viewer",
    "roles/stackdriver.resourceMetadata.writer",
  ])
  project = var.project_id
  role    = each.value
  member  = "serviceAccount:${google_service_account.nodes.email}"
}

resource "google_artifact_registry_repository_iam_member" "nodes_pull" {
  repository = google_artifact_registry_repository.images.name
  location   = var.region
  role       = "roles/artifactregistry.reader"
  member     = "serviceAccount:${google_service_account.nodes.email}"
}

# The ledger writer: creates and reads objects in the ledger bucket only (no delete, no admin).
resource "google_service_account" "ledger_writer" {
  account_id   = "${var.name}-ledger-writer"
  display_name = "Society Runner ledger export"
}

resource "google_storage_bucket_iam_member" "ledger_writer" {
  for_each = toset(["roles/storage.objectCreator", "roles/storage.objectViewer"])
  bucket   = google_storage_bucket.ledgers.name
  role     = each.value
  member   = "serviceAccount:${google_service_account.ledger_writer.email}"
}

# The run worker's Kubernetes ServiceAccount acts as the ledger writer (Workload Identity). On
# this profile the controller runs inside the worker's pod, so this is the controller's identity.
resource "google_service_account_iam_member" "worker_is_ledger_writer" {
  service_account_id = google_service_account.ledger_writer.name
  role               = "roles/iam.workloadIdentityUser"
  member             = "serviceAccount:${local.workload_pool}[${var.system_namespace}/${local.worker_ksa}]"
}
