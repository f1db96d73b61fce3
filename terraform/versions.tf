terraform {
  # OpenTofu >= 1.8 or Terraform >= 1.5 (the static checks here run OpenTofu 1.12.6).
  required_version = ">= 1.5.0"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = "= 6.50.0"
    }
  }
}

provider "google" {
  project = var.project_id
  region  = var.region
}
