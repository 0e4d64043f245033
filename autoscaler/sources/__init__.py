"""Metric sources: Prometheus/GMP, Cloud Monitoring and direct pod scraping, behind one interface, with freshness."""
