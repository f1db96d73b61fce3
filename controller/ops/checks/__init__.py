"""The cluster profiles' static checks (``society profile check``): the kind and GKE profiles'
checked-in contracts (chart, schemas, Terraform, pins, scripts), verified offline."""
