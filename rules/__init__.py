"""What Prometheus and Alertmanager run with: the recording and alert rules generated from
rules/settings.yaml, prometheus.yml and alertmanager.yml.

Pure builders of file content, at the exporter's layer: the launcher (stack) writes them at
start, the deployment renderer (deploygen) writes the compose and Kubernetes copies, and
neither has to import the other.
"""
