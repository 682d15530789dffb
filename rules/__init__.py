"""What Prometheus and Alertmanager run with: the recording and alert rules generated from
rules/settings.yaml, prometheus.yml and alertmanager.yml.

Builders of file content, and the atomic writer and staleness check of generated files, at
the exporter's layer: the launcher (stack) writes them at start, the deployment renderer
(deploygen) writes the compose and Kubernetes copies, and neither has to import the other.
"""
