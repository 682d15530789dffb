"""The deployment renderer: deploy/ (compose's Prometheus config, the Kubernetes objects, the
Grafana dashboard and its provisioning), generated from the same sources as the local stack.

A package of its own, between the launcher and the dashboard: it needs the rules and
prometheus.yml's builder (rules/), the dashboard's queries and the Grafana SDK, none of
which the launcher needs to start anything. Only ``batchscope render`` imports it. The
Grafana dashboard's builder (deploygen.grafana) lives here, not in dashboard/, because the
renderer is its only user: the Streamlit pages never import it.
"""
