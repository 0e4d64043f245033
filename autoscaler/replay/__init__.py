"""Dry-run replay of a policy over recorded metric traces (Prometheus query_range JSON or CSV). Contacts nothing."""
