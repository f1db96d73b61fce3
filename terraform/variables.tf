variable "project_id" {
  description = "The Google Cloud project to create everything in."
  type        = string
}

variable "region" {
  description = "The region of the regional cluster, the registry and the bucket."
  type        = string
  default     = "europe-west4"
}

variable "name" {
  description = "Prefix of every resource's name (cluster, network, registry, service accounts)."
  type        = string
  default     = "society"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,18}[a-z0-9]$", var.name))
    error_message = "name must be 3-20 characters of lowercase letters, digits and hyphens, starting with a letter."
  }
}

variable "ledger_bucket" {
  description = "Name of the GCS bucket ledgers are exported to (globally unique)."
  type        = string
}

variable "kubernetes_version" {
  description = "Minimum control-plane version (the Kubernetes minor of kind/versions.env)."
  type        = string
  default     = "1.36"
}

variable "release_channel" {
  description = "GKE release channel; the chart and the tests target Kubernetes 1.36."
  type        = string
  default     = "REGULAR"
}

variable "master_ipv4_cidr_block" {
  description = "The /28 of the control plane's private endpoint."
  type        = string
  default     = "172.16.0.0/28"
}

variable "master_authorized_cidrs" {
  description = "CIDRs allowed to reach the control plane's public endpoint (kubectl, helm)."
  type        = list(string)
  default     = []
}

variable "system_machine_type" {
  description = "Machine type of the system pool (run worker, controller, Kueue, Agent Sandbox)."
  type        = string
  default     = "e2-standard-4"
}

variable "agents_machine_type" {
  description = "Machine type of the agents pool."
  type        = string
  default     = "e2-standard-8"
}

variable "agents_max_nodes_per_zone" {
  description = "Upper bound of the agents pool's autoscaler, per zone; the queue quota is sized to it."
  type        = number
  default     = 2
}

variable "agents_node_cpu" {
  description = "Allocatable CPU cores of one agents node, used to size the Kueue quota (e2-standard-8: 7.91)."
  type        = number
  default     = 7.5
}

variable "agents_node_memory_gib" {
  description = "Allocatable memory of one agents node in GiB, used to size the Kueue quota (e2-standard-8: about 27)."
  type        = number
  default     = 26
}

variable "system_namespace" {
  description = "Namespace the Helm chart is installed in (the run worker's)."
  type        = string
  default     = "society-system"
}

variable "zones" {
  description = "Zones of the node pools (in var.region); the agents quota counts nodes in each."
  type        = list(string)
  default     = ["europe-west4-a", "europe-west4-b", "europe-west4-c"]
}
